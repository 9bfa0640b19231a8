"""Weight-only int8 (model/int8.py): the kernel equals the dequantized reference, the model stays close to float32,
our engine and transformers' generate() run the same int8 model to the same tokens, and the CLI flag works."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import random_pages
from unlimited_ocr.cli import main
from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.engine.reference import new_tokens, transformers_generate
from unlimited_ocr.model.int8 import Int8Linear, int8_matmul, is_quantized, quantize_decoder, quantize_weight
from unlimited_ocr.model.loading import load_model
from unlimited_ocr.model.prompt import build_input_ids


def test_quantized_matmul_equals_the_dequantized_reference():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 64, generator=generator) * torch.linspace(0.1, 3.0, 96).unsqueeze(1)  # rows differ
    values, scale = quantize_weight(weight)
    assert values.dtype == torch.int8 and scale.shape == (96,)
    dequantized = values.float() * scale.unsqueeze(1)
    # Symmetric rounding: every weight within half a step of its row's scale, the largest one exact.
    assert torch.all((dequantized - weight).abs() <= scale.unsqueeze(1) / 2 + 1e-6)
    assert torch.equal(values.abs().amax(dim=1), torch.full((96,), 127, dtype=torch.int8))
    inputs = torch.randn(2, 5, 64, generator=generator)  # (B, T, in)
    output = int8_matmul(inputs, values, scale)
    assert output.shape == (2, 5, 96) and output.dtype == torch.float32

    def relative_error(actual, expected):
        return float((actual - expected).norm() / expected.norm())

    # The kernel multiplies bfloat16-rounded activations by the int8 weights and scales (its fast path): equal to
    # that product in float32 up to bfloat16 rounding of the result, and within ~1% of the float32 activations'.
    rounded = inputs.bfloat16().float()
    assert relative_error(output, rounded @ dequantized.T) < 4e-3
    assert relative_error(output, inputs @ dequantized.T) < 1e-2
    assert relative_error(output, inputs @ dequantized.flip(0).T) > 0.5  # a swapped row/scale would show
    linear = torch.nn.Linear(64, 96)
    module = Int8Linear.from_linear(linear)
    values, scale = quantize_weight(linear.weight)
    assert relative_error(module(inputs), rounded @ (values.float() * scale[:, None]).T + linear.bias) < 4e-3


def _teacher_forced_logits(loaded, pages, continuation):
    engine = OcrEngine(loaded)
    ids, features = engine.prepare(pages, DecodeOptions())
    sequence = torch.cat([ids, torch.tensor(continuation)])
    embeds = loaded.model.model.language_model.embed_tokens(sequence)
    embeds[: ids.shape[0]][ids == loaded.image_token_id] = torch.cat(features).to(embeds.dtype)
    with torch.no_grad():
        hidden = loaded.model.model.language_model(inputs_embeds=embeds[None]).last_hidden_state
        return loaded.model.lm_head(hidden)[0, ids.shape[0] - 1:]  # (continuation + 1, V)


def test_int8_logits_stay_close_to_float32_teacher_forced(tiny_checkpoint):
    """Every decoder matrix, the experts and lm_head quantized: relative L2 error of the logits over 96 forced
    positions well under the 3% the official shapes must meet (a wrong scale axis or a dropped expert gives ~100%)."""
    pages = random_pages(2, seed=41)
    continuation = torch.randint(5, 60, (96,), generator=torch.Generator().manual_seed(1)).tolist()
    reference = _teacher_forced_logits(load_model(str(tiny_checkpoint), device="cpu"), pages, continuation)
    loaded = load_model(str(tiny_checkpoint), device="cpu")
    quantize_decoder(loaded.model)
    assert is_quantized(loaded.model)
    language_model = loaded.model.model.language_model
    assert not any(isinstance(module, torch.nn.Linear) for module in language_model.modules())
    assert isinstance(loaded.model.lm_head, Int8Linear)
    experts = [module for module in language_model.modules() if hasattr(module, "gate_up_int8")]
    assert experts and all(not hasattr(module, "gate_up_proj") for module in experts)
    quantized = _teacher_forced_logits(loaded, pages, continuation)
    error = (quantized - reference).norm() / reference.norm()
    assert error < 0.02, float(error)


def test_engine_and_transformers_generate_agree_on_the_int8_model(tiny_checkpoint):
    """Both paths dispatch the experts through transformers' hook to the same int8 kernel: the same tokens, with
    EOS suppressed for 3 windows and more (ring wraps included)."""
    loaded = load_model(str(tiny_checkpoint), device="cpu")
    quantize_decoder(loaded.model)
    engine = OcrEngine(loaded)
    pages = random_pages(2, seed=42)
    length = 3 * engine.window + 7
    result = engine.generate([pages], DecodeOptions(max_new_tokens=length, ignore_eos=True, end_at_extra_page=False,
                                                    continue_to_last_page=False))[0]
    pixels = [engine.preprocess(page) for page in pages]
    ids = build_input_ids(loaded.tokenizer, [p.num_positions for p in pixels])
    output = transformers_generate(loaded, pixels, ids, length, force_length=True)
    assert len(result.token_ids) == length
    assert result.token_ids == new_tokens(loaded, output, ids.shape[0])


def test_parse_with_quantize_int8_end_to_end(tmp_path, tiny_checkpoint, capsys):
    image = tmp_path / "page.png"
    random_pages(1, seed=43)[0].save(image)
    out = tmp_path / "out"
    code = main(["parse", str(image), "-o", str(out), "--model", str(tiny_checkpoint), "--quantize", "int8",
                 "--max-new-tokens", "12", "--quiet", "--device", "cpu"])
    data = json.loads((out / "page.png.json").read_text())
    assert code == 0 and data["generated_tokens"] > 0
    # int8 keeps float32 activations: asking for another dtype is a usage error before anything is loaded.
    assert main(["parse", str(image), "-o", str(out), "--quantize", "int8", "--dtype", "bfloat16", "--quiet"]) == 2
    assert "--quantize int8" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["parse", "x.pdf", "-o", "o"], ["batch", "in", "-o", "o"], ["serve"],
                                     ["eval", "pdf-text", "x.pdf"]])
def test_every_engine_command_takes_quantize(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0 and "--quantize {none,int8,int4}" in capsys.readouterr().out


def test_quantize_command_round_trip_loads_without_float_decoder_weights(tmp_path, tiny_checkpoint, monkeypatch):
    """`unlimited-ocr quantize` writes an int8 folder; loading it never builds float decoder weights (no
    from_pretrained, the structure is made on the meta device) and gives the in-memory int8 model's tokens."""
    out = tmp_path / "int8"
    assert main(["quantize", str(tiny_checkpoint), str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["unlimited_ocr_quantization"] == "int8"
    in_memory = load_model(str(tiny_checkpoint), device="cpu")
    quantize_decoder(in_memory.model)
    from transformers import UnlimitedOcrForConditionalGeneration

    def refuse(*args, **kwargs):
        raise AssertionError("an int8 folder must not go through from_pretrained's float weights")

    monkeypatch.setattr(UnlimitedOcrForConditionalGeneration, "from_pretrained", refuse)
    reloaded = load_model(str(out), device="cpu")
    assert is_quantized(reloaded.model)
    expected = dict(in_memory.model.state_dict())
    for name, tensor in reloaded.model.state_dict().items():
        assert torch.equal(tensor, expected.pop(name)), name
    assert not expected
    pages = random_pages(1, seed=44)
    options = DecodeOptions(max_new_tokens=40, ignore_eos=True)
    assert OcrEngine(reloaded).generate([pages], options)[0].token_ids == \
        OcrEngine(in_memory).generate([pages], options)[0].token_ids
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as saved:  # decoder matrices stored as int8, 1 byte each
        matrices = [saved.get_slice(name) for name in saved.keys() if "language_model.layers" in name
                    and not name.endswith(("_scale", "mlp.gate.weight"))  # scales and the router stay float
                    and len(saved.get_slice(name).get_shape()) >= 2]
        assert matrices and {matrix.get_dtype() for matrix in matrices} == {"I8"}


def test_read_safetensors_equals_the_library_and_aligns_every_tensor(tmp_path):
    from safetensors.torch import load_file, save_file

    from unlimited_ocr.model.weights_io import read_safetensors

    tensors = {"a": torch.arange(7, dtype=torch.int8), "b": torch.randn(3, 5).bfloat16(), "c": torch.randn(2, 2),
               "d": torch.tensor([True, False]), "e": torch.zeros(0, 4), "f": torch.tensor(3, dtype=torch.int64)}
    save_file(tensors, str(tmp_path / "x.safetensors"))
    ours, library = read_safetensors(tmp_path / "x.safetensors"), load_file(str(tmp_path / "x.safetensors"))
    assert ours.keys() == library.keys()
    for name, tensor in ours.items():
        assert tensor.dtype == library[name].dtype and torch.equal(tensor, library[name]), name
        assert tensor.numel() == 0 or tensor.data_ptr() % 64 == 0, name  # the int8 kernel needs aligned rows
