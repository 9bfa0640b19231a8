"""Training-step benchmark: seconds per step (forward + backward) in float32 and under bfloat16 autocast, one run.

    unlimited-ocr bench train-step --config runs/tiles-n3/config.json --threads 2      # a run's model and data
    unlimited-ocr bench train-step --config runs/tiles-n3/config.json \
        --init-from runs/tiles-n3/checkpoints/step-0002800 --steps 8 --rounds 2 --json step.json

The same ``--steps`` batches (built once, before timing) go through each precision in turn, ``--rounds`` times after
one warm-up step each, so both see the same tokens and the ratio comes from this one run (these machines are noisy).
A step here is ``compute_loss`` + ``backward``, as in training; the optimizer update (the same in both) and batch
building are left out. Without ``--config`` the trainer's default model and synthetic pages are measured.
Nothing is written to the run folder: the trainer works in a temporary one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

PRECISIONS = ("float32", "bfloat16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="a run's config.json (model, data, batch size); "
                                                       "default: the trainer's defaults")
    parser.add_argument("--init-from", default=None, help="a checkpoint or export to load (realistic activations)")
    parser.add_argument("--precisions", default="float32,bfloat16", help="comma list of float32, bfloat16")
    parser.add_argument("--steps", type=int, default=4, help="batches per round (default 4)")
    parser.add_argument("--rounds", type=int, default=2, help="timed passes over the batches per precision")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--json", default=None, help="write the figures as JSON to this path")


def measure(trainer, batches: list, precisions: list[str], rounds: int) -> dict:
    """Per precision: every step's seconds, the median, and the loss of the first batch (they must agree)."""
    seconds = {name: [] for name in precisions}
    first_loss = {}

    def step(batch, precision: str) -> float:
        trainer.config.cpu_bf16 = precision == "bfloat16"  # the trainer's own autocast, as `train --cpu-bf16` runs
        start = time.perf_counter()
        with trainer.autocast():
            loss, _ = trainer.compute_loss(batch)
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        elapsed = time.perf_counter() - start
        first_loss.setdefault(precision, float(loss.detach()))
        return elapsed

    trainer.module.train()
    for name in precisions:  # warm-up: allocator, oneDNN primitives of each precision
        step(batches[0], name)
    for _ in range(rounds):
        for name in precisions:
            seconds[name].extend(step(batch, name) for batch in batches)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {"seconds": {n: [round(v, 4) for v in values] for n, values in seconds.items()},
            "median_s": {n: round(v, 4) for n, v in medians.items()}, "first_loss": first_loss}


def run(args: argparse.Namespace) -> int:
    from ..train.config import TrainConfig
    from ..train.trainer import Trainer

    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown or not precisions:
        print(f"error: --precisions takes {', '.join(PRECISIONS)} (got {args.precisions!r})")
        return 2
    if args.steps < 1 or args.rounds < 1:
        print("error: --steps and --rounds must be >= 1")
        return 2
    with tempfile.TemporaryDirectory(prefix="uocr-bench-train-") as run_dir:
        config = TrainConfig.load(args.config) if args.config else TrainConfig(run_dir=run_dir)
        config.run_dir, config.threads, config.device, config.cpu_bf16 = run_dir, args.threads, "cpu", False
        trainer = Trainer(config, resume=False, init_from=args.init_from)
        level = trainer.state["level"]
        batches = [trainer.batch_for(index * config.batch_size, level) for index in range(args.steps)]
        tokens = [int(batch.input_ids.numel()) for batch in batches]
        figures = measure(trainer, batches, precisions, args.rounds)
    medians = figures["median_s"]
    print(f"batch {config.batch_size}, {statistics.mean(tokens):.0f} token slots per batch, {args.steps} batches x "
          f"{args.rounds} rounds, {args.threads} threads")
    print("| precision | median s/step | first-batch loss |")
    print("|---|---:|---:|")
    for name in precisions:
        print(f"| {name} | {medians[name]:.3f} | {figures['first_loss'][name]:.4f} |")
    ratio = None
    if "float32" in medians and "bfloat16" in medians:
        ratio = round(medians["float32"] / medians["bfloat16"], 2)
        print(f"  speed of bfloat16 autocast against float32 (float32 s/step / bfloat16 s/step, this run): {ratio}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"threads": args.threads, "config": args.config, "init_from": args.init_from,
                       "batch_size": config.batch_size, "token_slots": tokens, **figures, "speedup": ratio},
                      handle, indent=2)
    return 0
