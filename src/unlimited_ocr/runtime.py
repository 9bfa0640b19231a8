"""One engine spec for every command: the same flags, the same defaults, one validation, one ``build_engine``.

    from unlimited_ocr.runtime import EngineSpec, build_engine
    engine = build_engine(EngineSpec(model="/path/to/Unlimited-OCR", device="cuda", compile=True))

``parse``, ``batch`` (local and Ray actors), ``serve``, ``eval pdf-text``, ``eval synthetic``, ``bench
long-horizon`` and ``bench book`` add the flags with :func:`add_engine_arguments`, read them with
:func:`spec_from_args` and build with :func:`build_engine`, so a flag means the same everywhere. (The commands that
compare modes side by side take the spec for all of them and switch only what a mode is about: ``full`` reads with
full attention over the same weights, ``sliding`` holds ``--reference-pages`` pages. ``bench decode`` compares
engines and weight formats on one checkpoint and keeps its own flags; ``train`` evaluates the model it is training.)
The spec is a frozen, picklable dataclass: the Ray runner ships it to its actors.

What is not here on purpose: the decode strategy (``--mode one-pass|per-page``) and per-request options
(``DecodeOptions``: budget, no-repeat n-gram, image mode) belong to the command or the request, not the engine.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16", "float64")
QUANTIZE_CHOICES = ("none", "int8", "int4")


class EngineSpecError(ValueError):
    """A spec that cannot work (the message is the one line the CLI prints; usage error, exit 2)."""


@dataclass(frozen=True)
class EngineSpec:
    """How to load and run the model."""

    model: str | None = None  # checkpoint folder, official folder or hub id; None = the bundled checkpoint
    device: str | None = None  # "cpu", "cuda", "cuda:1"; None = cuda when available
    dtype: str = "auto"  # auto = bfloat16 on CUDA, float32 on CPU
    attention: str | None = None  # "rswa" or "full"; None = what the checkpoint was trained with
    window: int | None = None  # R-SWA window n (generated tokens a token sees, itself included); None = checkpoint's
    # torch.compile the R-SWA decode step (with CUDA graphs on a GPU): True always, False never, None = where it
    # pays (engine.py, AUTO_COMPILE_AFTER_STEPS: a decode that has written 4,096 tokens, 12,288 more expected)
    compile: bool | None = None
    # One pass with only K pages in the reference, sliding over the document (engine/sliding.py); None = all pages.
    # Needs a checkpoint with page-anchored positions; checked once the model is loaded.
    reference_pages: int | None = None
    threads: int | None = None  # torch CPU threads; None = torch's default
    # "int8": weight-only int8 decoder + lm_head (model/int8.py), for CPUs; "none": the checkpoint's weights
    quantize: str = "none"

    @property
    def compile_setting(self) -> bool | str:
        """What OcrEngine's ``compile`` takes: True, False or "auto" (the default, None here)."""
        return "auto" if self.compile is None else self.compile

    def validate(self, mode: str = "one-pass") -> None:
        """Checks that need no model. ``mode`` is the command's decode strategy (one-pass or per-page)."""
        if self.dtype not in DTYPE_CHOICES:
            raise EngineSpecError(f"--dtype must be one of {', '.join(DTYPE_CHOICES)}, not {self.dtype!r}")
        if self.attention not in (None, "rswa", "full"):
            raise EngineSpecError(f"--attention must be rswa or full, not {self.attention!r}")
        if self.window is not None and self.window < 1:
            raise EngineSpecError("--window must be at least 1")
        if self.quantize not in QUANTIZE_CHOICES:
            raise EngineSpecError(f"--quantize must be one of {', '.join(QUANTIZE_CHOICES)}, not {self.quantize!r}")
        if self.quantize != "none" and self.dtype not in ("auto", "float32"):
            raise EngineSpecError(f"--quantize {self.quantize} keeps activations in float32; it cannot be combined with "
                                  f"--dtype {self.dtype}")
        if self.threads is not None and self.threads < 1:
            raise EngineSpecError("--threads must be at least 1")
        if self.compile and self.attention == "full":
            raise EngineSpecError("--compile compiles the R-SWA step; it cannot be combined with --attention full")
        if self.reference_pages is not None:
            if self.reference_pages < 2:
                raise EngineSpecError("--reference-pages must be at least 2")
            if mode != "one-pass":
                raise EngineSpecError("--reference-pages is for one-pass decoding, not --mode per-page")
            if self.attention == "full":
                raise EngineSpecError("--reference-pages slides the R-SWA reference; not with --attention full")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine flags, identical on every command that runs the model."""
    group = parser.add_argument_group("engine (the same on every command)")
    group.add_argument("--model", default=None,
                       help="checkpoint folder, hub id, or the name of a shipped checkpoint: unlimited-ocr-tiny (the "
                            "default, synthetic cards only) or unlimited-ocr-tiny-print (the real-document preview, "
                            "pooled CER 0.10 on held-out pages)")
    group.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    group.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                       help="weights and activations (default auto: bfloat16 on CUDA, float32 on CPU)")
    group.add_argument("--attention", choices=["rswa", "full"], default=None,
                       help="rswa (static cache) or full (growing cache, for comparison); default: the checkpoint's")
    group.add_argument("--window", type=int, default=None,
                       help="R-SWA window n: generated tokens each token sees (default: the checkpoint's)")
    group.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                       help="torch.compile the R-SWA decode step (a one-off 10-50 s compile, then ~1.6x the eager "
                            "step on a CPU; with CUDA graphs on a GPU, ~6x at official shapes). Default: where it "
                            "pays: a decode that has written 4,096 tokens and, at its rate per page, has 12,288 more "
                            "to write switches to the compiled step (CPU with the small models' experts kernel, or CUDA; a C++ compiler "
                            "installed); --compile always, --no-compile never")
    group.add_argument("--reference-pages", type=int, default=None, metavar="K",
                       help="one pass with only K pages in the reference at a time, sliding as the model moves on "
                            "(books: the cache stays K pages + the window; needs page-anchored positions, like the "
                            "bundled model)")
    group.add_argument("--threads", type=int, default=None,
                       help="torch CPU threads (default: torch's choice)")
    group.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none",
                       help="int8: weight-only int8 decoder and lm_head, activations in float32; int4: the same with "
                            "4-bit routed experts (groups of 64), ~1.5x faster at the official shapes (CPU; default "
                            "none)")


def spec_from_args(args: argparse.Namespace) -> EngineSpec:
    return EngineSpec(model=args.model, device=args.device, dtype=args.dtype, attention=args.attention,
                      window=args.window, compile=args.compile, reference_pages=args.reference_pages,
                      threads=args.threads, quantize=args.quantize)


def build_engine(spec: EngineSpec, mode: str = "one-pass"):
    """Validate, load the model and wrap it in an :class:`~unlimited_ocr.engine.OcrEngine`.

    Raises :class:`EngineSpecError` for a spec that cannot work with this model and
    :class:`~unlimited_ocr.model.loading.ModelNotFoundError` when ``spec.model`` names nothing loadable.
    """
    spec.validate(mode)
    import torch
    from transformers.utils import logging as hf_logging

    from .engine import OcrEngine
    from .model.loading import dtype_from_name, load_model

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if spec.threads:
        torch.set_num_threads(spec.threads)
    device = spec.device or ("cuda" if torch.cuda.is_available() else "cpu")
    loaded = load_model(spec.model, device=device, dtype=dtype_from_name(spec.dtype))
    if spec.quantize in ("int8", "int4"):
        from .model.int8 import is_quantized, quantize_decoder

        if loaded.dtype != torch.float32:
            raise EngineSpecError(f"--quantize {spec.quantize} keeps activations in float32: use it with --dtype "
                                  "float32 (the default on a CPU)")
        if not is_quantized(loaded.model):
            quantize_decoder(loaded.model, scheme=spec.quantize)
    if spec.reference_pages is not None and not loaded.positions.anchored:
        raise EngineSpecError("--reference-pages needs a checkpoint with page-anchored positions "
                              "(page_position_stride in its config.json); this model numbers positions sequentially")
    # On a GPU, eager decode is bound by kernel launches; CUDA graphs (reduce-overhead) replay a whole step at once
    # (official shapes on an H200: 487 tok/s against 77 eager; same tokens, tests/engine/test_cuda.py).
    compile_mode = "reduce-overhead" if loaded.device.type == "cuda" else None
    return OcrEngine(loaded, attention=spec.attention, window=spec.window, compile=spec.compile_setting,
                     compile_mode=compile_mode)
