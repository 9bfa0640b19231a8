"""``unlimited-ocr train``: train a small UnlimitedOcr from scratch on synthetic pages (CPU or GPU, DDP via torchrun).

    unlimited-ocr train --run-dir runs/probe --steps 600 --stop-at 17:00
    unlimited-ocr train --run-dir runs/real --data data/real-pdf --real-fraction 0.3 --fonts system
    torchrun --nproc_per_node=2 -m unlimited_ocr.train --run-dir runs/ddp --steps 600
    unlimited-ocr train --run-dir runs/probe --export-only        # export the latest checkpoint

A run folder that already holds a checkpoint is resumed exactly (its config.json wins; only the run-time flags
--stop-at, --time-budget, --threads, --workers, --device, --cpu-bf16, --eval-every, --checkpoint-every and --log-every
apply).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from .config import TrainConfig

RUNTIME_FIELDS = ("time_budget_s", "stop_at", "threads", "workers", "device", "cpu_bf16", "eval_every_s",
                  "checkpoint_every_s", "log_every")


def parse_stop_at(text: str | None) -> float:
    """'HH:MM' (UTC, today, or tomorrow if already past) or a unix timestamp -> unix time; None -> 0."""
    if not text:
        return 0.0
    if ":" in text:
        hours, minutes = (int(x) for x in text.split(":"))
        now = dt.datetime.now(dt.timezone.utc)
        when = now.replace(hour=hours, minute=minutes, second=0, microsecond=0)
        if when <= now:
            when += dt.timedelta(days=1)
        return when.timestamp()
    return float(text)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="unlimited-ocr train", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--run-dir", required=True, help="run folder (checkpoints, log.jsonl, export/)")
    add("--steps", type=int, default=None, help="optimizer steps (length of the cosine schedule)")
    add("--batch-size", type=int, default=None, help="samples per step over all processes")
    add("--lr", type=float, default=None)
    add("--warmup", type=int, default=None, help="warmup steps")
    add("--curriculum", default=None, help="'STEP:LEVEL,...' e.g. '0:1,300:2'")
    add("--advance-cer", type=float, default=None, help="move one curriculum level up when held-out CER < this")
    add("--max-level", type=int, default=None, help="highest level --advance-cer may reach")
    add("--eval-level", type=int, default=None, help="curriculum level of the CER that picks the exported model")
    add("--eval-samples", type=int, default=None)
    add("--mix", choices=["single", "multi", "mixed"], default=None)
    add("--max-pages", type=int, default=None, help="pages of a multi-page sample: 2..MAX_PAGES")
    add("--multi-fraction", type=float, default=None, help="share of multi-page samples under --mix mixed")
    add("--font-size", default=None, help="body font size range in px, e.g. 20,28")
    add("--lines-per-page", default=None, help="text lines per page range, e.g. 1,20 (the curriculum narrows it)")
    add("--no-degrade", action="store_true", help="clean renders (no blur/noise/skew)")
    add("--fonts", default=None, help="font families of the pages: 'mono', 'sans,serif', or 'system' (every "
        "training-split face installed by scripts/install_fonts.sh); default: the four bundled families")
    add("--line-spacing", default=None, help="baseline pitch range as a multiple of the font height, e.g. 1.0,1.0")
    add("--margin", default=None, help="page margin range as a fraction of the page side, e.g. 0,0.03")
    add("--italic", type=float, default=None, help="probability of an italic paragraph")
    add("--data", default=None, metavar="DIR",
        help="real page/text pairs (messages JSONL, from `unlimited-ocr data pdf-pairs`) mixed with synthetic pages")
    add("--real-fraction", type=float, default=None, help="share of samples drawn from --data (default 0.5)")
    add("--real-degrade", type=float, default=None,
        help="share of the --data samples given scan-like degradations (downscale, blur, noise; default 0)")
    add("--attention", choices=["rswa", "full"], default=None, help="'full': the full-attention twin")
    add("--window", type=int, default=None, help="R-SWA window n")
    add("--freeze-encoder", action="store_true", help="freeze the vision tower (SAM + CLIP)")
    add("--encoder-lr-scale", type=float, default=None,
        help="the vision tower trains at lr * this (e.g. 0.1: a gentle encoder in a multi-page stage; default 1)")
    add("--page-stride", type=int, default=None,
        help="page-anchored rotary ids with this many positions per page (0 = sequential, the official scheme)")
    add("--reflow-tile", type=int, default=None, metavar="PX",
        help="the export reads pages as reflowed tiles of PX pixels (model/reflow.py; a model trained on crops of "
             "that size); 0 = one view per page")
    add("--reflow-line-height", type=int, default=None, metavar="PX",
        help="with --reflow-tile: the export scales every page so its median text line is PX pixels tall on the "
             "tiles (match the tiles of --data: data pdf-pairs --reflow-line-height); 0 = only pages outside "
             "16-25 px")
    add("--aux", choices=["grid", "ctc", "none"], default=None,
        help="auxiliary loss on the visual tokens (training only): per-cell characters, CTC, or none")
    add("--aux-weight", type=float, default=None, help="auxiliary loss weight (0 disables the head)")
    add("--guide-weight", type=float, default=None,
        help="guided-attention loss weight (one head per layer attends to the cell being read; 0 = off)")
    add("--ctc-frames", type=int, default=None)
    add("--grid-slots", type=int, default=None)
    add("--pack-length", type=int, default=None, help="packed row length in tokens (0 = no packing)")
    add("--image-size", type=int, default=None)
    add("--sam-patch", type=int, default=None)
    add("--hidden", type=int, default=None, help="decoder hidden size")
    add("--layers", type=int, default=None, help="decoder layers")
    add("--sam-hidden", type=int, default=None, help="SAM width (the windowed ViT on the patches)")
    add("--sam-layers", type=int, default=None, help="SAM blocks")
    add("--sam-neck", type=int, default=None, help="SAM neck output channels (before the two stride-2 convs)")
    add("--vision-hidden", type=int, default=None,
        help="CLIP width; the stride-2 convs widen the neck to it (vision_hidden / 2, then vision_hidden)")
    add("--vision-layers", type=int, default=None, help="CLIP blocks")
    add("--threads", type=int, default=None, help="torch threads per process (0 = cpus / processes)")
    add("--device", default=None, help="cpu, cuda or auto (default cpu); a resumed run may change it")
    add("--cpu-bf16", action="store_true", default=None,
        help="train under bfloat16 autocast on the CPU too (float32 master weights): pays on big batches (512-px "
             "tiles: 1.22-1.47x per step), not on small ones; `bench train-step` measures it. A resumed run may "
             "switch it on")
    add("--workers", type=int, default=None,
        help="DataLoader processes rendering the next batches (a GPU run on many cores; default 0: in-process)")
    add("--time-budget", type=float, default=None, help="minutes of training for this invocation")
    add("--stop-at", default=None, help="stop (checkpoint + export) at HH:MM UTC or a unix time")
    add("--eval-every", type=float, default=None, help="seconds between held-out evals")
    add("--eval-every-steps", type=int, default=None)
    add("--checkpoint-every", type=float, default=None, help="seconds between checkpoints")
    add("--log-every", type=int, default=None, help="steps between loss records in log.jsonl")
    add("--seed", type=int, default=None, help="model-initialisation seed (fresh weights and auxiliary heads)")
    add("--data-seed", type=int, default=None,
        help="seed of the training pages (a continued stage can see new pages); the held-out pages do not depend on it")
    add("--init-from", default=None, help="start from an exported model folder or a run checkpoint folder (fine-tuning; a checkpoint also brings the auxiliary heads)")
    add("--init-partial", action="store_true",
        help="with --init-from: load the weights whose shapes match (e.g. a trained decoder under a wider vision "
             "tower); the rest start fresh")
    add("--init-widen", action="store_true",
        help="with --init-from an exported folder: this run's vision tower is wider (--sam-hidden, --sam-neck, "
             "--vision-hidden: whole multiples of the source's) and starts as the source's trained tower, every "
             "channel a copy, so the model computes the same function before its first step (train/widen.py)")
    add("--no-resume", action="store_true", help="start over even if the run folder holds a checkpoint")
    add("--config-from", default=None, metavar="CONFIG_JSON",
        help="start from another run's config.json (a new stage with its settings); other flags override it")
    add("--export-only", action="store_true", help="export the latest checkpoint to RUN_DIR/export-last and exit")
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    saved = Path(args.run_dir) / "config.json"
    resuming = not args.no_resume and (Path(args.run_dir) / "checkpoints" / "latest").exists() and saved.exists()
    if resuming:
        config = TrainConfig.load(saved)
    elif args.config_from:  # a new stage with an earlier run's settings; the flags below still override them
        config = TrainConfig.load(args.config_from)
    else:
        config = TrainConfig(run_dir=args.run_dir)
    config.run_dir = args.run_dir
    runtime = {
        "time_budget_s": None if args.time_budget is None else args.time_budget * 60,
        "stop_at": parse_stop_at(args.stop_at) if args.stop_at else None,
        "threads": args.threads, "workers": args.workers, "device": args.device, "cpu_bf16": args.cpu_bf16,
        "eval_every_s": args.eval_every, "checkpoint_every_s": args.checkpoint_every, "log_every": args.log_every,
    }
    for name, value in runtime.items():
        if value is not None:
            setattr(config, name, value)
    if resuming:
        return config
    simple = {
        ("steps", None): args.steps, ("batch_size", None): args.batch_size, ("attention", None): args.attention,
        ("aux", None): args.aux, ("aux_weight", None): args.aux_weight, ("ctc_frames", None): args.ctc_frames,
        ("grid_slots", None): args.grid_slots, ("guide_weight", None): args.guide_weight,
        ("pack_length", None): args.pack_length, ("page_position_stride", None): args.page_stride,
        ("reflow_tile", None): args.reflow_tile, ("reflow_line_height", None): args.reflow_line_height,
        ("seed", None): args.seed, ("seed", "data"): args.data_seed,
        ("eval_every_steps", None): args.eval_every_steps,
        ("lr", "optim"): args.lr, ("warmup_steps", "optim"): args.warmup,
        ("encoder_lr_scale", "optim"): args.encoder_lr_scale,
        ("curriculum", "data"): args.curriculum, ("advance_cer", "data"): args.advance_cer,
        ("eval_level", "data"): args.eval_level, ("max_level", "data"): args.max_level, ("eval_samples", "data"): args.eval_samples,
        ("mix", "data"): args.mix, ("max_pages", "data"): args.max_pages,
        ("real_data", "data"): args.data, ("real_fraction", "data"): args.real_fraction,
        ("real_degrade", "data"): args.real_degrade,
        ("multi_fraction", "data"): args.multi_fraction,
        ("sliding_window", "model"): args.window, ("image_size", "model"): args.image_size,
        ("sam_patch_size", "model"): args.sam_patch, ("hidden_size", "model"): args.hidden,
        ("num_layers", "model"): args.layers, ("sam_hidden", "model"): args.sam_hidden,
        ("sam_layers", "model"): args.sam_layers, ("sam_neck_channels", "model"): args.sam_neck,
        ("vision_hidden", "model"): args.vision_hidden, ("vision_layers", "model"): args.vision_layers,
    }
    for (name, part), value in simple.items():
        if value is not None:
            setattr(getattr(config, part) if part else config, name, value)
    if args.font_size:
        low, high = (int(x) for x in args.font_size.split(","))
        config.data.body_font_size = (low, high)
    if args.lines_per_page:
        low, high = (int(x) for x in args.lines_per_page.split(","))
        config.data.lines_per_page = (low, high)
    if args.no_degrade:
        config.data.degrade = False
    if args.fonts:
        config.data.font_families = tuple(name.strip() for name in args.fonts.split(","))
    if args.line_spacing:
        low, high = (float(x) for x in args.line_spacing.split(","))
        config.data.line_spacing = (low, high)
    if args.margin:
        low, high = (float(x) for x in args.margin.split(","))
        config.data.margin = (low, high)
    if args.italic is not None:
        config.data.italic_probability = args.italic
    if args.freeze_encoder:
        config.freeze_encoder = True
    if config.optim.warmup_steps >= config.steps:
        config.optim.warmup_steps = max(1, config.steps // 10)
    return config


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    from .trainer import Trainer

    config = config_from_args(args)
    if config.reflow_line_height and not config.reflow_tile:
        parser.error("--reflow-line-height needs --reflow-tile (or a --config-from that sets it)")
    for name in ("real_fraction", "real_degrade"):
        if not 0.0 <= getattr(config.data, name) <= 1.0:
            parser.error(f"--{name.replace('_', '-')} is a share of samples: between 0 and 1")
    trainer = Trainer(config, resume=not args.no_resume, init_from=args.init_from, init_partial=args.init_partial,
                      init_widen=args.init_widen)
    try:
        if args.export_only:
            if trainer.rank == 0:
                print(trainer.export(Path(config.run_dir) / "export-last", {"step": trainer.state["step"]}))
            return 0
        result = trainer.train()
        if trainer.rank == 0:
            print(f"done: step {result['step']}, best held-out CER {result['best_cer']} at step "
                  f"{result['best_step']}; export: {Path(config.run_dir) / 'export'}", flush=True)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
