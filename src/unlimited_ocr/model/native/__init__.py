"""Native CPU kernels, built on first use with the system C++ compiler and loaded with ``ctypes``.

    from unlimited_ocr.model.native import int8_gemv, native_status
    y = int8_gemv(x, values, scale)        # x (1, in) float32, values (out, in) int8, scale (out,) -> (1, out)
    print(native_status())                 # which kernel runs, or why none does

Why: one decoded token streams every int8 weight matrix of the decoder once. On this project's 2-core AVX-512
machine, from DRAM, PyTorch's ``_weight_int8pack_mm`` reads them at ~9 GB/s (and rounds the activations to
bfloat16, relative error ~3e-3); ``int8_gemv.cpp`` at ~14-15 GB/s, with VNNI byte products of 16-bit activations
(error ~3e-5) or float32 activations (docs/benchmarks.md, "Native int8 kernels"). A layer's chosen experts run in
one call (:func:`int8_gated_mlp`), and so does each gated MLP.

How: the source ships in the package; the first call compiles it (``c++ -O3 -fopenmp -shared``, about 2 s) into
``$XDG_CACHE_HOME/unlimited-ocr/kernels/`` (default ``~/.cache``) under a name that hashes the source and the
compiler, written to a temporary file and renamed, so a half-built library is never loaded. The library links the
``libgomp`` PyTorch has already loaded (same soname), so its threads and PyTorch's are one OpenMP pool. Without a
compiler, without AVX2 + FMA, or with ``UNLIMITED_OCR_NATIVE=0``, :func:`available` is False and callers keep
PyTorch's kernel: the same numbers up to the activations' bfloat16 rounding.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("int8_gemv.cpp")
_ISA_CODES = {"avx512vnni": 3, "avx512": 2, "avx2": 1}  # the builds in int8_gemv.cpp


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _isa() -> str | None:
    """The widest instruction set the kernel has a build for and this CPU runs (x86-64 Linux only)."""
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512_vnni"} <= flags:
        return "avx512vnni"
    if {"avx512f", "avx512bw"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "unlimited-ocr" / "kernels"


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


class _Native:
    def __init__(self, library: ctypes.CDLL, isa: str, path: Path):
        self.isa, self.path = isa, path
        self.gemv = library.unlimited_ocr_int8_gemv
        self.gemv.restype = ctypes.c_int
        self.gemv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
        self.gated_mlp = library.unlimited_ocr_int8_gated_mlp
        self.gated_mlp.restype = ctypes.c_int
        self.gated_mlp.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                   *[ctypes.c_void_p] * 6, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int]


_STATUS: list[str] = ["not loaded yet"]


@lru_cache(maxsize=1)
def _load() -> _Native | None:
    if os.environ.get("UNLIMITED_OCR_NATIVE", "1") == "0":
        _STATUS[0] = "disabled by UNLIMITED_OCR_NATIVE=0"
        return None
    isa = _isa()
    if isa is None:
        _STATUS[0] = "this CPU has neither AVX-512 nor AVX2 + FMA (or is not x86-64 Linux)"
        return None
    compiler = _compiler()
    if compiler is None:
        _STATUS[0] = "no C++ compiler found (set CXX, or install g++)"
        return None
    flags = ["-O3", "-fopenmp", "-shared", "-fPIC"]
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
        key = hashlib.sha256(SOURCE.read_bytes() + version.encode() + " ".join(flags).encode()).hexdigest()[:16]
        target = _cache_dir() / f"int8_gemv-{key}.so"
        for attempt in range(2):
            if not target.exists():
                error = _build(compiler, flags, target)
                if error:
                    _STATUS[0] = error
                    return None
            try:
                native = _Native(ctypes.CDLL(str(target)), isa, target)
                break
            except OSError:
                if attempt:
                    raise
                target.unlink(missing_ok=True)  # a damaged library: built once more
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:  # RuntimeError: no home directory
        _STATUS[0] = f"native kernel unavailable: {error}"
        return None
    _STATUS[0] = f"native kernel, {isa} build ({target})"
    return native


def _build(compiler: str, flags: list[str], target: Path) -> str | None:
    """Compile the source into ``target`` (via a temporary file, renamed: another process sees the whole library
    or none); an error message, or None."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        result = subprocess.run([compiler, *flags, str(SOURCE), "-o", str(built)], capture_output=True, text=True,
                                timeout=300)
        if result.returncode != 0:
            return f"compiling {SOURCE.name} failed: {result.stderr.strip()[-500:]}"
        os.replace(built, target)
    return None


@torch.compiler.assume_constant_result  # a compiled step branches on it once, at trace time
def available() -> bool:
    return _load() is not None


def native_status() -> str:
    """One line: which native kernel runs, or why PyTorch's does instead (builds it if needed)."""
    if _load() is None:
        return f"PyTorch's _weight_int8pack_mm ({_STATUS[0]})"
    return _STATUS[0]


_DISABLED = [False]


@contextmanager
def disabled():
    """PyTorch's kernel inside the block (eager code only): ``bench decode`` times both kernels in one process."""
    previous, _DISABLED[0] = _DISABLED[0], True
    try:
        yield
    finally:
        _DISABLED[0] = previous


def supports(inputs: torch.Tensor, values: torch.Tensor) -> bool:
    """Whether :func:`int8_gemv` takes this product: one token, CPU tensors, int8 weights, and a built kernel."""
    return (inputs.device.type == "cpu" and values.device.type == "cpu" and values.dtype == torch.int8
            and values.dim() == 2 and inputs.numel() == values.shape[1] and available() and not _DISABLED[0])


def int8_gemv(inputs: torch.Tensor, values: torch.Tensor, scale: torch.Tensor,
              isa: str | None = None) -> torch.Tensor:
    """``inputs @ (values * scale[:, None]).T`` for ONE token: ``(..., in)`` with one row -> ``(..., out)``
    float32 (activations as 16-bit integers in the VNNI build, float32 in the others). Call only where
    :func:`supports` holds. ``isa``: force a narrower build than the CPU's (tests run each)."""
    native = _load()
    out_features, in_features = values.shape
    if values.dtype != torch.int8 or scale.numel() != out_features or inputs.numel() != in_features:
        raise ValueError(f"int8 GEMV: one token of {in_features} against int8 ({out_features}, {in_features}) "
                         f"weights and {out_features} scales, not {tuple(inputs.shape)}, {values.dtype}, "
                         f"{scale.numel()} scales")
    x = inputs.reshape(in_features).to(torch.float32).contiguous()  # (in,)
    w = values if values.is_contiguous() else values.contiguous()  # (out, in) int8
    s = scale.to(torch.float32).contiguous()  # (out,)
    y = torch.empty(out_features, dtype=torch.float32)  # (out,)
    status = native.gemv(_ISA_CODES[isa or native.isa], x.data_ptr(), w.data_ptr(), s.data_ptr(), y.data_ptr(),
                         out_features, in_features, torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"native int8 GEMV failed ({status})")
    return y.reshape(*inputs.shape[:-1], out_features)


def _pointers(addresses: list[int]) -> ctypes.Array:
    return (ctypes.c_void_p * len(addresses))(*addresses)


def int8_gated_mlp(inputs: torch.Tensor, gates: list[tuple[torch.Tensor, torch.Tensor]],
                   ups: list[tuple[torch.Tensor, torch.Tensor]], downs: list[tuple[torch.Tensor, torch.Tensor]],
                   weights: list[float], isa: str | None = None) -> torch.Tensor:
    """``sum_j weights[j] * down_j(silu(gate_j(x)) * up_j(x))`` for ONE token in one native call, each matrix an
    ``(int8 values, float32 scales)`` pair: gate and up ``(I, H)``, down ``(H, I)``, contiguous, the same shapes for
    every j. The routed experts of a decode step (k experts, router weights) or one MLP (weights ``[1.0]``)."""
    native = _load()
    hidden = inputs.shape[-1]
    inner = gates[0][0].shape[0]
    if not len(gates) == len(ups) == len(downs) == len(weights) or inputs.numel() != hidden:
        raise ValueError("gated MLP: one token, and as many gates, ups, downs and weights")
    for rows, cols, pairs in ((inner, hidden, gates), (inner, hidden, ups), (hidden, inner, downs)):
        for values, scale in pairs:
            if values.shape != (rows, cols) or values.dtype != torch.int8 or scale.numel() != rows:
                raise ValueError("gated MLP: every expert needs int8 gate/up (I, H), down (H, I) and their scales")
    # Weights are read through raw pointers: a non-contiguous view (never made by this package) is copied.
    gates, ups, downs = ([(values.contiguous(), scale) for values, scale in pairs] for pairs in (gates, ups, downs))
    x = inputs.reshape(hidden).to(torch.float32).contiguous()  # (H,)
    count = len(gates)
    scratch = torch.empty(2 * count * inner, dtype=torch.float32)  # gate and up activations of every expert
    output = torch.empty(hidden, dtype=torch.float32)  # (H,)
    router = torch.tensor(weights, dtype=torch.float32)  # (count,)
    keep = [x, scratch, output, router]  # alive until the call returns
    arrays = []
    for pairs in (gates, ups, downs):
        scales = [scale.to(torch.float32).contiguous() for _, scale in pairs]
        keep += scales
        arrays += [_pointers([values.data_ptr() for values, _ in pairs]), _pointers([s.data_ptr() for s in scales])]
    status = native.gated_mlp(_ISA_CODES[isa or native.isa], x.data_ptr(), hidden, inner, count, *arrays,
                              router.data_ptr(), scratch.data_ptr(), output.data_ptr(), torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"native int8 gated MLP failed ({status})")
    del keep
    return output.reshape(*inputs.shape[:-1], hidden)


def int8_experts_one_token(inputs: torch.Tensor, gate_up: torch.Tensor, gate_up_scale: torch.Tensor,
                           down: torch.Tensor, down_scale: torch.Tensor, top_k_index: torch.Tensor,
                           top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' fused experts for one token: ``gate_up`` ``(E, 2I, H)`` int8 (gate rows first, then up) with
    scales ``(E, 2I)``, ``down`` ``(E, H, I)`` with ``(E, H)``; the router's ``(1, k)`` choice and weights; an
    index >= E (an expert-parallel sentinel) is skipped. Returns ``(1, H)`` float32."""
    inner = gate_up.shape[1] // 2
    chosen = [(expert, weight) for expert, weight in zip(top_k_index.reshape(-1).tolist(),
                                                         top_k_weights.reshape(-1).tolist())
              if expert < gate_up.shape[0]]
    if not chosen:
        return torch.zeros(inputs.shape, dtype=torch.float32)
    return int8_gated_mlp(inputs, gates=[(gate_up[e, :inner], gate_up_scale[e, :inner]) for e, _ in chosen],
                          ups=[(gate_up[e, inner:], gate_up_scale[e, inner:]) for e, _ in chosen],
                          downs=[(down[e], down_scale[e]) for e, _ in chosen], weights=[w for _, w in chosen])


# The same three products as PyTorch operators, for a compiled decode step: torch.compile sees one opaque op per
# call (shapes from the fake functions) instead of breaking its graph at ctypes and .tolist(). Eager code calls
# the Python functions directly (an operator's dispatch costs ~10-30 us a call).
@torch.library.custom_op("unlimited_ocr::int8_gemv", mutates_args=())
def int8_gemv_op(inputs: torch.Tensor, values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return int8_gemv(inputs, values, scale)


@int8_gemv_op.register_fake
def _(inputs, values, scale):
    return inputs.new_empty((*inputs.shape[:-1], values.shape[0]), dtype=torch.float32)


def int8_mlp(inputs: torch.Tensor, gate: torch.Tensor, gate_scale: torch.Tensor, up: torch.Tensor,
             up_scale: torch.Tensor, down: torch.Tensor, down_scale: torch.Tensor) -> torch.Tensor:
    """One gated MLP (``down(silu(gate(x)) * up(x))``) for one token: :func:`int8_gated_mlp` with one expert."""
    return int8_gated_mlp(inputs, [(gate, gate_scale)], [(up, up_scale)], [(down, down_scale)], [1.0])


@torch.library.custom_op("unlimited_ocr::int8_gated_mlp", mutates_args=())
def int8_gated_mlp_op(inputs: torch.Tensor, gate: torch.Tensor, gate_scale: torch.Tensor, up: torch.Tensor,
                      up_scale: torch.Tensor, down: torch.Tensor, down_scale: torch.Tensor) -> torch.Tensor:
    return int8_mlp(inputs, gate, gate_scale, up, up_scale, down, down_scale)


@int8_gated_mlp_op.register_fake
def _(inputs, gate, gate_scale, up, up_scale, down, down_scale):
    return inputs.new_empty(inputs.shape, dtype=torch.float32)


@torch.library.custom_op("unlimited_ocr::int8_experts_one_token", mutates_args=())
def int8_experts_one_token_op(inputs: torch.Tensor, gate_up: torch.Tensor, gate_up_scale: torch.Tensor,
                              down: torch.Tensor, down_scale: torch.Tensor, top_k_index: torch.Tensor,
                              top_k_weights: torch.Tensor) -> torch.Tensor:
    return int8_experts_one_token(inputs, gate_up, gate_up_scale, down, down_scale, top_k_index, top_k_weights)


@int8_experts_one_token_op.register_fake
def _(inputs, gate_up, gate_up_scale, down, down_scale, top_k_index, top_k_weights):
    return inputs.new_empty(inputs.shape, dtype=torch.float32)


def call(function, operator, *args):
    """``function(*args)`` eagerly, ``operator(*args)`` inside torch.compile."""
    return operator(*args) if torch.compiler.is_compiling() else function(*args)
