"""One engine spec for every command: the same flags in every --help, the same EngineSpec from the same flags,
and the checks that need no model refused before anything is loaded."""

from __future__ import annotations

import pytest

from tests.conftest import random_pages
from unlimited_ocr import cli, runtime
from unlimited_ocr.runtime import EngineSpec, EngineSpecError

ENGINE_FLAGS = ("--model", "--device", "--dtype", "--attention", "--window", "--compile", "--reference-pages",
                "--threads", "--quantize")
# Every command that runs the model, with its own required arguments (inputs and outputs filled in per test).
COMMANDS = {
    "parse": lambda src, out: ["parse", str(src / "page.png"), "-o", str(out), "--quiet"],
    "batch": lambda src, out: ["batch", str(src), "-o", str(out)],
    "serve": lambda src, out: ["serve", "--port", "9"],
    "eval pdf-text": lambda src, out: ["eval", "pdf-text", str(src / "page.pdf")],
    "eval synthetic": lambda src, out: ["eval", "synthetic", "--pages", "1", "--docs", "1"],
    "bench long-horizon": lambda src, out: ["bench", "long-horizon", "--pages", "2", "--modes", "one-pass",
                                            "--no-tesseract", "--out", str(out)],
}
# Shown with the same flags, built in a fresh process per book (its own defaults: 4 reference pages, 2 threads).
HELP_ONLY = {"bench book": None}


@pytest.mark.parametrize("command", [*COMMANDS, *HELP_ONLY])
def test_every_command_shows_the_same_engine_flags(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*command.split(), "--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    missing = [flag for flag in ENGINE_FLAGS if flag not in shown]
    assert not missing, f"{command} --help lacks {missing}"


class _Built(Exception):
    """Raised by the stand-in build_engine: the spec was handed over, nothing more to run."""


@pytest.fixture
def inputs(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    page = random_pages(1, seed=3, size=(200, 160))[0]
    page.save(folder / "page.png")
    page.save(folder / "page.pdf")
    return folder


def test_each_command_builds_its_engine_from_the_same_spec(inputs, tmp_path, monkeypatch):
    seen: dict[str, EngineSpec] = {}
    current = {}

    def fake_build(spec, mode="one-pass"):
        seen[current["command"]] = spec
        raise _Built

    monkeypatch.setattr(runtime, "build_engine", fake_build)
    # Benchmark cells run in fresh processes; here in this one, so the stand-in sees their spec.
    monkeypatch.setattr("unlimited_ocr.bench.long_horizon.run_isolated", lambda target, *args: target(*args, None))
    flags = ["--device", "cpu", "--dtype", "float32", "--attention", "rswa", "--window", "64", "--compile",
             "--threads", "1"]
    for command, argv in COMMANDS.items():
        current["command"] = command
        with pytest.raises(_Built):
            cli.main([*argv(inputs, tmp_path / command.replace(" ", "-")), *flags])
    expected = EngineSpec(model=None, device="cpu", dtype="float32", attention="rswa", window=64, compile=True,
                          threads=1)
    assert seen == {command: expected for command in COMMANDS}


@pytest.mark.parametrize("spec, message", [
    (EngineSpec(reference_pages=1), "at least 2"),
    (EngineSpec(compile=True, attention="full"), "--attention full"),
    (EngineSpec(reference_pages=4, attention="full"), "--attention full"),
    (EngineSpec(window=0), "--window"),
    (EngineSpec(threads=0), "--threads"),
    (EngineSpec(dtype="int3"), "--dtype"),
])
def test_specs_that_cannot_work_are_refused(spec, message):
    with pytest.raises(EngineSpecError, match=message):
        spec.validate()


def test_reference_pages_need_one_pass():
    EngineSpec(reference_pages=4).validate("one-pass")
    with pytest.raises(EngineSpecError, match="per-page"):
        EngineSpec(reference_pages=4).validate("per-page")


@pytest.mark.parametrize("command", ["parse", "batch", "serve"])
def test_a_bad_spec_is_a_usage_error_before_any_model_loads(command, inputs, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("unlimited_ocr.model.loading.load_model",
                        lambda *a, **k: pytest.fail("a refused spec must not load a model"))
    argv = COMMANDS[command](inputs, tmp_path / "out")
    assert cli.main([*argv, "--compile", "--attention", "full"]) == 2
    assert "--attention full" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
