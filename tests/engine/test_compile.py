"""compile="auto" (the default of every command): a decode switches to the compiled R-SWA step once its output has
proved long enough to repay the compile, short decodes never compile, and a compile that fails never costs a
document."""

from types import SimpleNamespace

import pytest
import torch

from tests.conftest import random_pages
from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.engine import engine as engine_module
from unlimited_ocr.model.loading import load_model


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    return load_model(str(tiny_checkpoint))


def _counting_compile(calls):
    def compile_(function, **kwargs):
        def compiled(*args):
            calls.append(kwargs)
            return function(*args)
        return compiled
    return compile_


def test_auto_switches_to_the_compiled_step_once_the_output_is_long(loaded, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "compile", _counting_compile(calls))
    monkeypatch.setattr(engine_module, "compiler_available", lambda: True)
    monkeypatch.setattr(engine_module, "AUTO_COMPILE_AFTER_STEPS", 10)
    monkeypatch.setattr(engine_module, "AUTO_COMPILE_MIN_REMAINING", 20)
    # What is left is judged by the budget here (a random model writes no pages to measure a rate on); the rate
    # estimate itself is checked by hand below.
    monkeypatch.setattr(engine_module, "expected_remaining_steps", lambda rows, budget_left: budget_left)
    pages = random_pages(1, seed=3)
    eager = OcrEngine(loaded).generate([pages], DecodeOptions(max_new_tokens=30, ignore_eos=True))[0]
    engine = OcrEngine(loaded, compile="auto")
    assert engine.decode_experts == "batched_mm"  # the CPU kernel whose compiled step was measured to pay
    short = engine.generate([pages], DecodeOptions(max_new_tokens=29, ignore_eos=True))[0]
    assert calls == [] and short.token_ids == eager.token_ids[:29]  # 19 steps left at step 10: not worth it
    long = engine.generate([pages], DecodeOptions(max_new_tokens=30, ignore_eos=True))[0]
    assert len(calls) == 20 and calls[0]["dynamic"] is False  # steps 10..29 compiled, the first ten eager
    assert long.token_ids == eager.token_ids
    calls.clear()
    monkeypatch.setattr(engine_module, "compiler_available", lambda: False)  # no C++ compiler: eager
    engine.generate([pages], DecodeOptions(max_new_tokens=30, ignore_eos=True))
    assert calls == []
    monkeypatch.setattr(engine_module, "compiler_available", lambda: True)
    OcrEngine(loaded, attention="full", compile="auto").generate([pages], DecodeOptions(max_new_tokens=30,
                                                                                        ignore_eos=True))
    assert calls == []  # only the R-SWA step is compiled
    other_kernel = OcrEngine(loaded, compile="auto")
    other_kernel.decode_experts = "grouped_mm"  # a CPU kernel whose compiled step was never measured: eager
    other_kernel.generate([pages], DecodeOptions(max_new_tokens=30, ignore_eos=True))
    assert calls == []


def test_a_failed_compile_falls_back_to_the_eager_step_with_the_same_tokens(loaded, monkeypatch, caplog):
    def broken_compile(function, **kwargs):
        def compiled(*args):
            raise RuntimeError("InductorError: no working C++ compiler")
        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    monkeypatch.setattr(engine_module, "compiler_available", lambda: True)
    monkeypatch.setattr(engine_module, "AUTO_COMPILE_AFTER_STEPS", 1)
    monkeypatch.setattr(engine_module, "AUTO_COMPILE_MIN_REMAINING", 1)
    monkeypatch.setattr(engine_module, "expected_remaining_steps", lambda rows, budget_left: budget_left)
    pages = random_pages(2, seed=4)
    options = DecodeOptions(max_new_tokens=3 * loaded.window, ignore_eos=True)
    eager = OcrEngine(loaded).generate([pages], options)[0]
    engine = OcrEngine(loaded, compile="auto")
    with caplog.at_level("WARNING"):
        result = engine.generate([pages], options)[0]
    assert result.token_ids == eager.token_ids and len(result.token_ids) == 3 * loaded.window
    assert "decoding without it" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert engine.generate([pages], options)[0].token_ids == eager.token_ids
    assert caplog.text == ""  # once failed, the engine stays eager without trying again
    with pytest.raises(RuntimeError, match="InductorError"):  # --compile asked for it: the failure is shown
        OcrEngine(loaded, compile=True).generate([pages], options)


def test_expected_remaining_steps_by_hand():
    def row(tokens, begun, pages, running=True):
        return SimpleNamespace(tokens=[0] * tokens, pages=SimpleNamespace(begun=begun), num_pages=pages,
                               running=running)

    expected = engine_module.expected_remaining_steps
    # 4,096 tokens over 2 of 40 pages begun: 2,048 per page, 38 pages to go.
    assert expected([row(4096, 2, 40)], 10**9) == 2048 * 38
    # The bundled model's cards: 4,096 tokens over 82 of 100 pages: ~50 per page, 18 to go -> 899.
    assert expected([row(4096, 82, 100)], 10**9) == 4096 * 18 // 82
    assert expected([row(4096, 1, 1)], 10**9) == 0  # a single page: nothing is expected beyond it
    assert expected([row(4096, 2, 40)], 5000) == 5000  # never more than the budget left
    assert expected([row(4096, 2, 40, running=False), row(100, 0, 3)], 10**9) == 0  # finished, or no page yet
    assert expected([row(4096, 82, 100), row(4096, 2, 40)], 10**9) == 2048 * 38  # the longest row decides
