"""Decode benchmark: tokens/s at output positions 256, N/2 and N for our R-SWA engine, our full-attention mode and
transformers' own ``generate()`` on the same tiny random checkpoint (built on the fly, nothing downloaded).

    unlimited-ocr bench decode --pages 10 --tokens 8192
    unlimited-ocr bench decode --pages 10 --tokens 8192 --json decode.json
    unlimited-ocr bench decode --pages 10 --tokens 8192 --compile   # our decode step under torch.compile

    unlimited-ocr bench decode --pages 10 --tokens 32768 --positions 256,1024,2048,4096,8192,16384,32768 \
        --engines rswa,full --plot runs/decode.png     # the paper's Table 4 / Fig. 3

    # GPU: the official model's shapes (3B MoE decoder, SAM-B + CLIP-L encoder), random bf16 weights
    unlimited-ocr bench decode --device cuda --preset official --pages 10 --tokens 4096 --engines rswa,full

Each engine runs in its own process, so its peak RSS is its own. All three decode greedily with the paper's
no-repeat rule (35-gram, window 1024 for several pages) and never stop early (EOS is suppressed). tok/s at
position p is 1 / the median step latency of the 128 steps ending at p (a median, so a burst of load from another
process does not decide the figure); it is reported on the wall clock and on the decoding thread's CPU clock (one
torch thread per engine by default, so CPU time is the work itself, whatever else the machine is doing). An extra short R-SWA run (N/8 tokens) shows whether peak memory grows with the
output length. The printed ratios come from this one run (these machines are noisy).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from .isolated import current_rss_mb, peak_rss_mb, run_isolated

RATE_SPAN = 128  # tokens over which tok/s at a position is measured


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pages", type=int, default=10, help="pages prefilled as reference (273 positions each)")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens to decode (N)")
    parser.add_argument("--engines", default="rswa,full,transformers",
                        help="comma list of rswa, full, transformers (default: all three)")
    parser.add_argument("--json", default=None, help="write the rows as JSON to this path")
    parser.add_argument("--checkpoint", default=None, help="use this checkpoint instead of a random one")
    parser.add_argument("--preset", choices=["tiny", "official"], default="tiny",
                        help="random model when no --checkpoint: tiny (256 hidden, 4 layers; the CPU default) or "
                             "official (the released model's shapes: 12-layer 64-expert MoE decoder, SAM-B + CLIP-L; "
                             "our character vocabulary; for a GPU)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                        help="default auto: bfloat16 on CUDA, float32 on CPU")
    # One thread each by default: with OpenMP spin-waiting, 2 threads on 2 busy cores can be 20x slower, which
    # would make the figures measure the neighbours instead of the engines.
    parser.add_argument("--threads", type=int, default=1, help="torch threads per engine process (default 1)")
    parser.add_argument("--positions", default=None,
                        help="comma list of output positions to report (default: 256, N/2, N)")
    parser.add_argument("--plot", default=None, help="write a PNG of step latency and tok/s against position")
    parser.add_argument("--compile", action="store_true",
                        help="run our R-SWA decode step under torch.compile (static shapes; the one-off compile "
                             "time is reported as the first step's latency, not hidden in the rates)")
    parser.add_argument("--quantize", default="none",
                        help="comma list of none, int8, int4: each engine runs once per weight format (int8: "
                             "weight-only int8 decoder and lm_head, model/int8.py; int4: 4-bit routed experts, "
                             "model/int4.py; rows carry a 'quantize' key)")
    parser.add_argument("--compile-mode", default=None, choices=["default", "reduce-overhead", "max-autotune"],
                        help="torch.compile mode with --compile (reduce-overhead: CUDA graphs on a GPU)")


def positions_for(tokens: int) -> list[int]:
    return sorted({min(256, tokens), max(tokens // 2, 1), tokens})


def rate_at(step_times: list[float], position: int) -> float:
    """Tokens/s at 1-based output ``position``: 1 / median latency of the RATE_SPAN steps ending there."""
    import statistics

    end = min(position, len(step_times)) - 1
    start = max(end - RATE_SPAN, 0)
    if end <= start:
        return float("nan")
    latencies = [b - a for a, b in zip(step_times[start:end], step_times[start + 1 : end + 1])]
    return 1.0 / statistics.median(latencies)


def latency_series(step_times: list[float], every: int = 64) -> list[list[float]]:
    """[[position, median step latency in ms over the previous ``every`` steps], ...] for the JSON output."""
    import statistics

    series = []
    for end in range(every, len(step_times), every):
        window = [b - a for a, b in zip(step_times[end - every : end], step_times[end - every + 1 : end + 1])]
        series.append([end, round(statistics.median(window) * 1000, 4)])
    return series


class _RandomPages:
    """``count`` random page images, each drawn when asked for (its own seed): like the document runner's pages,
    they are never all alive at once, so peak RSS measures the engine and not a pile of test images."""

    def __init__(self, count: int, seed: int = 0):
        self.count, self.seed = count, seed

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        import numpy as np
        from PIL import Image

        if not 0 <= index < self.count:
            raise IndexError(index)  # also ends a for loop over the pages (the sequence protocol)
        rng = np.random.default_rng((self.seed, index))
        return Image.fromarray(rng.integers(0, 255, (512, 384, 3), dtype=np.uint8))


def _worker(engine_name: str, checkpoint: str, pages: int, tokens: int, threads: int | None, compile_step: bool,
            device: str, dtype: str | None, compile_mode: str | None, quantize: str, queue) -> None:
    """Runs in a child process: one engine, one decode, report timings and memory."""
    import torch
    from transformers.utils import logging as hf_logging

    from ..engine import DecodeOptions, OcrEngine
    from ..engine.rows import no_repeat_window
    from ..model.loading import dtype_from_name, load_model

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if threads:
        torch.set_num_threads(threads)
    rss_before_load_mb = current_rss_mb()  # the interpreter, torch and transformers: not the load's doing
    loaded = load_model(checkpoint, device=device, dtype=dtype_from_name(dtype))
    load_peak_mb = peak_rss_mb()  # the load: ≤ 1.2x the weights above the imports is the target (weights_io.py)
    weight_mb = sum(t.nbytes for t in [*loaded.model.parameters(), *loaded.model.buffers()]) / 2**20
    if quantize in ("int8", "int4"):
        from ..model.int8 import is_quantized, quantize_decoder

        if not is_quantized(loaded.model):  # the bench hands int8 runs an int8 copy (see run()); a model in memory
            quantize_decoder(loaded.model, scheme=quantize)
    from ..model.native import native_status

    kernel = native_status() if quantize in ("int8", "int4") and device == "cpu" else None
    kernel_steps = None
    attention = "full" if engine_name == "full" else "rswa"
    engine = OcrEngine(loaded, attention=attention, compile=compile_step and engine_name == "rswa",
                       compile_mode=compile_mode)
    on_gpu = loaded.device.type == "cuda"
    window = no_repeat_window(pages)
    encode_start = time.perf_counter()
    input_ids, features = engine.prepare(_RandomPages(pages), DecodeOptions())  # a chunk of pixels at a time
    encode_seconds = (time.perf_counter() - encode_start) / pages  # preprocess + vision encoder, per page
    if engine_name in ("rswa", "full"):
        options = DecodeOptions(max_new_tokens=tokens, ignore_eos=True, no_repeat_window=window, record_step_times=True)
        cpu_times: list[float] = []
        result = engine.generate_prepared([(input_ids, features)], options,
                                          on_token=lambda row, token, page: cpu_times.append(time.thread_time()))[0]
        step_times, kv_bytes = result.step_times, result.kv_bytes
        first_step = result.first_step_seconds
        if kernel and kernel.startswith("native"):
            kernel_steps = _native_against_pytorch(engine, input_ids, features, window)
    else:
        pixels = [engine.preprocess(page) for page in _RandomPages(pages)]  # generate() takes them all at once
        step_times, cpu_times, kv_bytes = _transformers_generate(engine, pixels, input_ids, tokens)
        first_step = None  # generate() does not expose its first step apart from the prefill
    queue.put({
        "engine": engine_name,
        "step_times": step_times,
        "cpu_times": cpu_times,
        "kv_bytes": int(kv_bytes),
        "first_step_s": first_step,
        "peak_rss_mb": peak_rss_mb(),
        "load_peak_rss_mb": load_peak_mb, "weight_mb": weight_mb, "rss_before_load_mb": rss_before_load_mb,
        # On a GPU the KV cache lives in device memory: report the peak the CUDA allocator saw.
        "peak_gpu_mb": torch.cuda.max_memory_allocated(loaded.device) / 2**20 if on_gpu else None,
        "device": str(loaded.device), "dtype": str(loaded.dtype).replace("torch.", ""),
        "reference_length": int(input_ids.shape[0]),
        "encode_s_per_page": round(encode_seconds, 3),
        "int8_kernel": kernel,  # which one-token int8 product ran (model/native), or why PyTorch's did
        "kernel_steps_ms": kernel_steps,  # median decode step, native kernels vs PyTorch's, same process
    })


def _native_against_pytorch(engine, input_ids, features, window: int, tokens: int = 24) -> dict:
    """Median decode step of the same quantized model with the native one-token kernels and with PyTorch's
    (``native.disabled()``), alternated twice in this process: the kernels' own share of a step, from one run."""
    import statistics

    from ..engine import DecodeOptions
    from ..model import native

    options = DecodeOptions(max_new_tokens=tokens, ignore_eos=True, no_repeat_window=window, record_step_times=True)

    def median_step() -> float:
        times = engine.generate_prepared([(input_ids, features)], options)[0].step_times
        return statistics.median(b - a for a, b in zip(times[2:], times[3:]))

    steps: dict[str, list[float]] = {"native": [], "pytorch": []}
    for _ in range(2):
        steps["native"].append(median_step())
        with native.disabled():
            steps["pytorch"].append(median_step())
    return {name: round(1000 * min(values), 2) for name, values in steps.items()}


def _quantize_worker(checkpoint: str, out: str, scheme: str, queue) -> None:
    """In a child process (the float model's memory goes with it): the quantized copy, as `unlimited-ocr
    quantize --scheme SCHEME`, and its teacher-forced logit error against the float model."""
    from transformers.utils import logging as hf_logging

    from ..model.int8 import quantize_decoder, save_int8_model
    from ..model.loading import load_model

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    loaded = load_model(checkpoint, device="cpu", dtype=None)
    reference = teacher_forced_logits(loaded)
    quantize_decoder(loaded.model, scheme=scheme)
    error = float((teacher_forced_logits(loaded) - reference).norm() / reference.norm())
    queue.put({"path": str(save_int8_model(loaded, out)), "logits_error": error})


def teacher_forced_logits(loaded, positions: int = 256, seed: int = 0):
    """Logits of one random page's prompt followed by ``positions`` fixed random tokens (a full forward, no cache),
    ``(positions, V)``: the int8 model is compared with the float32 one on the same inputs."""
    import torch

    from ..engine import DecodeOptions, OcrEngine

    engine = OcrEngine(loaded)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        ids, features = engine.prepare(_RandomPages(1, seed), DecodeOptions())
        continuation = torch.randint(4, loaded.model.lm_head.out_features, (positions,), generator=generator)
        sequence = torch.cat([ids, continuation])  # (T + positions,)
        language_model = loaded.model.model.language_model
        embeds = language_model.embed_tokens(sequence)  # (T + positions, D)
        embeds[: ids.shape[0]][ids == loaded.image_token_id] = torch.cat(features).to(embeds.dtype)
        hidden = language_model(inputs_embeds=embeds[None]).last_hidden_state  # (1, T + positions, D)
        return loaded.model.lm_head(hidden[0, ids.shape[0] - 1 : -1]).float()  # the logits before each forced token


def _transformers_generate(engine, pixels, input_ids, tokens: int):
    """transformers' own generate() (engine/reference.py, the tests' reference), EOS suppressed so it runs exactly
    ``tokens`` steps; a streamer stamps the time of every token."""
    from ..engine.reference import cache_bytes, transformers_generate

    stamps: list[float] = []
    cpu_stamps: list[float] = []

    class Stamp:
        def put(self, value):
            stamps.append(time.perf_counter())
            cpu_stamps.append(time.thread_time())

        def end(self):
            pass

    output = transformers_generate(engine.loaded, pixels, input_ids, tokens, force_length=True, streamer=Stamp())
    return stamps[1:], cpu_stamps[1:], cache_bytes(output)  # the first put() is the prompt


def run_engine(engine_name: str, checkpoint: str, pages: int, tokens: int, threads: int | None,
               compile_step: bool = False, device: str = "cpu", dtype: str | None = None,
               compile_mode: str | None = None, quantize: str = "none") -> dict:
    return run_isolated(_worker, engine_name, checkpoint, pages, tokens, threads, compile_step, device, dtype,
                        compile_mode, quantize)


def label(engine: str, quantize: str) -> str:
    """Results key of one engine run: ``rswa``, or ``rswa+int8`` for its int8 twin."""
    return engine if quantize == "none" else f"{engine}+{quantize}"


def run(args: argparse.Namespace) -> int:
    from ..model.presets import BENCH_PRESET
    from ..model.random_checkpoint import write_official_size_checkpoint, write_random_checkpoint

    engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    unknown = set(engines) - {"rswa", "full", "transformers"}
    if unknown:
        print(f"error: unknown engine(s) {sorted(unknown)}", file=sys.stderr)
        return 2
    formats = [name.strip() for name in args.quantize.split(",") if name.strip()]
    if not formats or set(formats) - {"none", "int8", "int4"}:
        print(f"error: --quantize takes none, int8 and/or int4, not {args.quantize!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        if args.checkpoint:
            checkpoint, described = args.checkpoint, args.checkpoint
        elif args.preset == "official":
            print("writing a random official-size checkpoint...", file=sys.stderr, flush=True)
            checkpoint = str(write_official_size_checkpoint(Path(folder) / "official", device=args.device))
            described = "random UnlimitedOcr of the official shapes (1280 hidden, 12 layers, 64 experts top-6)"
        else:
            checkpoint = str(write_random_checkpoint(Path(folder) / "tiny", BENCH_PRESET))
            described = (f"tiny random UnlimitedOcr ({BENCH_PRESET.hidden_size} hidden, "
                         f"{BENCH_PRESET.num_layers} layers)")
        cell = dict(device=args.device, dtype=args.dtype, compile_mode=args.compile_mode)
        weights = {"none": checkpoint}
        logit_errors: dict[str, float] = {}
        for scheme in [name for name in formats if name != "none"]:  # what a user runs: `unlimited-ocr quantize`
            print(f"writing an {scheme} copy (unlimited-ocr quantize --scheme {scheme})...", file=sys.stderr,
                  flush=True)
            copy = run_isolated(_quantize_worker, checkpoint, str(Path(folder) / scheme), scheme)
            weights[scheme] = copy["path"]
            logit_errors[scheme] = copy["logits_error"]
            print(f"  {scheme} logits vs float32, teacher-forced over 256 positions: relative L2 error "
                  f"{100 * logit_errors[scheme]:.2f}%", file=sys.stderr, flush=True)
        positions = ([int(p) for p in args.positions.split(",") if p.strip()] if args.positions
                     else positions_for(args.tokens))
        rows, results = [], {}
        for quantize, engine_name in itertools.product(formats, engines):  # one run per (weights, engine)
            name = label(engine_name, quantize)
            print(f"running {name} ({args.tokens} tokens, {args.pages} pages)...", file=sys.stderr, flush=True)
            results[name] = run_engine(engine_name, weights[quantize], args.pages, args.tokens, args.threads,
                                       args.compile, quantize=quantize, **cell)
            rates = ", ".join(f"{rate_at(results[name]['step_times'], p):.1f}" for p in positions)
            print(f"  {name}: tok/s at {positions} = {rates}; encode {results[name]['encode_s_per_page']} s/page",
                  file=sys.stderr, flush=True)  # survives a timeout
            for position in positions:
                rows.append({
                    "engine": engine_name, "quantize": quantize, "label": name, "position": position,
                    "tok_per_s": round(rate_at(results[name]["step_times"], position), 2),
                    "tok_per_s_cpu": round(rate_at(results[name]["cpu_times"], position), 2),
                    "kv_bytes": results[name]["kv_bytes"], "peak_rss_mb": round(results[name]["peak_rss_mb"], 1),
                    "peak_gpu_mb": (round(results[name]["peak_gpu_mb"], 1) if results[name]["peak_gpu_mb"] is not None
                                    else None),
                })
        short = None
        if "rswa" in engines and "none" in formats and args.tokens >= 2048:
            short_tokens = args.tokens // 8
            print(f"running rswa again with {short_tokens} tokens (memory growth check)...", file=sys.stderr)
            short = run_engine("rswa", checkpoint, args.pages, short_tokens, args.threads, args.compile, **cell)
    reference = next(iter(results.values()))["reference_length"]
    first = next(iter(results.values()))
    on_gpu = first["peak_gpu_mb"] is not None
    print(f"\nDecode benchmark: {args.pages} pages (L_m = {reference} reference positions), {args.tokens} tokens, "
          f"{described}, {first['device']} {first['dtype']}"
          f"{', R-SWA step under torch.compile' if args.compile else ''}"
          f"{f' ({args.compile_mode})' if args.compile and args.compile_mode else ''}\n")
    memory = "peak GPU (MB)" if on_gpu else "peak RSS (MB)"
    print(f"| engine | weights | position | tok/s (wall) | tok/s (CPU time) | KV bytes | {memory} | encode s/page |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        peak = row["peak_gpu_mb"] if on_gpu else row["peak_rss_mb"]
        print(f"| {row['engine']} | {row['quantize']} | {row['position']} | {row['tok_per_s']:.1f} | "
              f"{row['tok_per_s_cpu']:.1f} | {row['kv_bytes']:,} | {peak:.0f} | "
              f"{results[row['label']]['encode_s_per_page']} |")
    summary = summarize(rows, args.tokens, results, short)
    for scheme, error in logit_errors.items():
        summary["values"][f"{scheme}_logits_relative_l2"] = round(error, 5)
        summary["lines"].append(f"  {scheme} logits vs float32 (teacher-forced, 256 positions): relative L2 "
                                f"{100 * error:.2f}%")
    for line in summary["lines"]:
        print(line)
    if args.json:
        payload = {"rows": rows, "pages": args.pages, "tokens": args.tokens, "reference_length": reference,
                   "summary": summary["values"],
                   "latency_ms": {name: latency_series(result["step_times"]) for name, result in results.items()}}
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    if args.plot:
        from .plots import plot_decode

        title = f"decode: {args.pages} pages (L_m = {reference}), {args.tokens} tokens"
        path = plot_decode({name: result["step_times"] for name, result in results.items()}, args.plot, title)
        print(f"plot: {path}")
    return 0


def summarize(rows: list[dict], tokens: int, results: dict, short: dict | None) -> dict:
    def rate(engine: str, position: int, key: str = "tok_per_s") -> float | None:
        for row in rows:  # engine: a results label (rswa, rswa+int8, ...)
            if row.get("label", row["engine"]) == engine and row["position"] == position:
                return row[key]
        return None

    first = min(256, tokens)
    lines, values = ["", "Ratios (this run):"], {}
    for engine in ("rswa", "full", "transformers", "rswa+int8", "rswa+int4"):
        start, end = rate(engine, first), rate(engine, tokens)
        if start and end:
            values[f"{engine}_end_over_start"] = round(end / start, 3)
            lines.append(f"  {engine}: tok/s at {tokens} / at {first} = {end / start:.2f}")
    for key, label in (("tok_per_s", "wall"), ("tok_per_s_cpu", "CPU time")):
        ours, theirs = rate("rswa", tokens, key), rate("transformers", tokens, key)
        if ours and theirs:
            values[f"rswa_over_transformers_at_end_{label.replace(' ', '_')}"] = round(ours / theirs, 2)
            lines.append(f"  R-SWA engine / transformers generate() at {tokens} ({label}): {ours / theirs:.2f}x")
    for scheme in ("int8", "int4"):
        for key, label_ in (("tok_per_s", "wall"), ("tok_per_s_cpu", "CPU time")):
            ours, theirs = rate(f"rswa+{scheme}", tokens, key), rate("transformers", tokens, key)
            if ours and theirs:
                values[f"rswa_{scheme}_over_transformers_at_end_{label_.replace(' ', '_')}"] = round(ours / theirs, 2)
                lines.append(f"  R-SWA engine {scheme} / transformers generate() float at {tokens} ({label_}): "
                             f"{ours / theirs:.2f}x ({ours:.2f} tok/s)")
    for name, result in results.items():
        if result.get("load_peak_rss_mb") and result.get("weight_mb", 0) >= 256 and result.get("peak_gpu_mb") is None:
            added = result["load_peak_rss_mb"] - result["rss_before_load_mb"]
            ratio = added / result["weight_mb"]
            values[f"{name}_load_peak_over_weights"] = round(ratio, 3)
            lines.append(f"  {name}: loading peaked at {result['load_peak_rss_mb']:.0f} MB RSS, "
                         f"{added:.0f} MB above the {result['rss_before_load_mb']:.0f} MB before it, for "
                         f"{result['weight_mb']:.0f} MB of weights = {ratio:.2f}x")
    for scheme in ("int8", "int4"):
        if f"rswa+{scheme}" in results:
            values[f"rswa_{scheme}_peak_rss_mb"] = round(results[f"rswa+{scheme}"]["peak_rss_mb"], 1)
            lines.append(f"  R-SWA {scheme} peak RSS: {results[f'rswa+{scheme}']['peak_rss_mb']:.0f} MB")
    kernels = {result["int8_kernel"] for result in results.values() if result.get("int8_kernel")}
    for kernel in sorted(kernels):
        lines.append(f"  one-token int8 products: {kernel}")
    for name, result in results.items():
        steps = result.get("kernel_steps_ms")
        if steps:
            values[f"{name}_step_ms_native"], values[f"{name}_step_ms_pytorch"] = steps["native"], steps["pytorch"]
            lines.append(f"  {name} decode step, same process: native kernels {steps['native']:.1f} ms, PyTorch's "
                         f"int8 kernel {steps['pytorch']:.1f} ms ({steps['pytorch'] / steps['native']:.2f}x)")
    start, end = rate("rswa", first, "tok_per_s_cpu"), rate("rswa", tokens, "tok_per_s_cpu")
    if start and end:
        values["rswa_end_over_start_cpu"] = round(end / start, 3)
        lines.append(f"  rswa (CPU time): tok/s at {tokens} / at {first} = {end / start:.2f}")
    first_step = results.get("rswa", {}).get("first_step_s")
    if first_step is not None:
        values["rswa_first_step_s"] = round(first_step, 3)
        lines.append(f"  rswa first decode step (includes any torch.compile): {first_step:.2f} s")
    if short and "rswa" in results:
        key, label = (("peak_gpu_mb", "GPU memory") if results["rswa"].get("peak_gpu_mb") is not None
                      else ("peak_rss_mb", "RSS"))
        growth = results["rswa"][key] / short[key]
        values["rswa_peak_rss_growth" if key == "peak_rss_mb" else "rswa_peak_gpu_growth"] = round(growth, 3)
        lines.append(f"  R-SWA peak {label} at {tokens} tokens / at {tokens // 8} tokens = {growth:.3f} "
                     f"({results['rswa'][key]:.0f} MB vs {short[key]:.0f} MB)")
    if "full" in results and "rswa" in results and results["rswa"]["kv_bytes"]:
        ratio = results["full"]["kv_bytes"] / results["rswa"]["kv_bytes"]
        values["full_over_rswa_kv_bytes"] = round(ratio, 3)
        lines.append(f"  KV cache at {tokens} tokens: full / R-SWA = {ratio:.2f}x")
    return {"lines": lines, "values": values}
