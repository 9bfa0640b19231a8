"""Training configuration: plain dataclasses, saved as JSON next to every checkpoint and export.

``TrainConfig`` holds everything a run depends on, so ``--resume`` can rebuild the same run from its folder and the
eval tools can rebuild the data distribution a checkpoint was trained on (``training_config.json`` in the export).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ModelSettings:
    """Architecture of a model trained from scratch (the official class, small). See model/presets.py."""

    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 512  # dense MLP of the first decoder layer
    num_experts: int = 8
    experts_per_token: int = 2
    moe_intermediate_size: int = 128
    sliding_window: int = 128  # R-SWA window n (the query itself counts)
    image_size: int = 256  # global view side in pixels; synthetic pages are 256 px, so no resampling
    # 256 px / 8 / 4 = 8 visual tokens per side, 73 prompt positions per page (32 px of page per token, about one
    # line of 20-28 px text per token row). Patch 4 (16 tokens per side) costs ~5x more per step on CPU.
    sam_patch_size: int = 8
    sam_hidden: int = 32
    sam_layers: int = 2
    # SAM windowed attention window, in SAM patches. 8 (vs the preset's 14): 64-patch windows; the rel-pos bias
    # forces sdpa's slow math kernel, so small windows are much cheaper on CPU.
    sam_window: int = 8
    # SAM layers with global attention. [] = windowed only: global attention over 64x64 patches costs ~6x the
    # whole step on CPU; the CLIP part does the global mixing over the 16x16 tokens anyway.
    sam_global_layers: list[int] = field(default_factory=list)
    # Init std of SAM's convolutions and linears. The official SAM config says 1e-10 (fine when SAM weights are
    # loaded, fatal from scratch: the vision branch starts dead).
    sam_init_std: float = 0.02
    sam_neck_channels: int = 16  # SAM neck output channels (the preset's 16)
    vision_hidden: int = 64  # CLIP width; the two stride-2 convs after the neck widen to vision_hidden / 2, then this
    vision_layers: int = 2


@dataclass
class DataSettings:
    """What pages the trainer sees (synthetic data engine, unlimited_ocr.data)."""

    # Curriculum schedule "STEP:LEVEL,...": from STEP on, pages of curriculum LEVEL (0 one word, 1 one line,
    # 2 a few lines, 3 headed text, 4 lists, 5 full page). "0:2" = level 2 throughout.
    curriculum: str = "0:1,300:2"
    # Automatic advance: at each eval, if the held-out CER at the current level is below this, move one level
    # up (never past max_level). None: follow the schedule only. The level reached is part of the resume state.
    advance_cer: float | None = None
    max_level: int = 5
    mix: str = "single"  # "single", "multi" or "mixed" (SyntheticDocs mix)
    max_pages: int = 4  # pages of multi-page samples (2..max_pages)
    # Share of multi-page samples under mix "mixed" (0.1: the paper's 9:1 single:multi mix). With max_pages 20 a
    # multi-page sample averages 11 pages, so 0.1 of the samples already carry over half of the pages.
    multi_fraction: float = 0.1
    degrade: bool = True  # scan-like degradations (blur, noise, skew); False = clean renders
    # Pixels per em on the 256 px page. The DataConfig default is (11, 16); 20-28 px text gives ~one text line per
    # 32 px token row, which an 8x8-token page can hold and a CTC head can read row by row.
    body_font_size: tuple[int, int] = (20, 28)
    lines_per_page: tuple[int, int] = (1, 12)  # the ceiling the curriculum levels narrow
    # Typography of the training pages (None = the data engine's defaults: every family, 1.0-1.35 spacing, 3-10%
    # margins, 10% italic paragraphs). A narrower style makes a tiny model read far sooner: "mono" at 27 px is 16 px
    # per glyph and ~32 px per line, i.e. two glyphs per visual token and one text line per token row.
    font_families: tuple[str, ...] | None = None
    line_spacing: tuple[float, float] | None = None
    margin: tuple[float, float] | None = None  # fraction of the page side
    italic_probability: float | None = None  # per paragraph
    seed: int = 0  # data seed (--data-seed): sample i of the train split is a pure function of (config, seed, i);
    # the held-out split always uses sources.HELDOUT_SEED
    # Real page/text pairs (a messages-JSONL dataset, `unlimited-ocr data pdf-pairs`) mixed with the synthetic
    # pages: sample i is a real one with probability real_fraction (decided by i alone, so resume stays exact).
    # A stable ~5% of the dataset's documents (by name) is held out; evals report its loss (real_heldout_ce).
    real_data: str | None = None
    real_fraction: float = 0.5
    # Share of the real samples given the scan-like degradations of the synthetic pages (downscale, blur, noise;
    # never rotation, which would move the recorded character centres): real tiles are clean renders, so without
    # it the model meets scan texture only on synthetic crops. Decided by the sample index alone (resume stays exact).
    real_degrade: float = 0.0
    eval_samples: int = 32  # held-out pages per periodic eval
    # Level of the held-out set that picks the best checkpoint (CER at this level decides what is exported).
    # None: the highest level of the schedule.
    eval_level: int | None = None


@dataclass
class OptimSettings:
    lr: float = 2e-3
    min_lr_ratio: float = 0.05  # cosine decays to lr * min_lr_ratio at the last step
    warmup_steps: int = 100
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    # The vision tower (SAM + CLIP) trains at lr * encoder_lr_scale. A multi-page stage can keep adapting the
    # encoder gently instead of freezing it (freeze_encoder), so single-page reading is not lost. 1.0 = one lr.
    encoder_lr_scale: float = 1.0


@dataclass
class TrainConfig:
    run_dir: str = "runs/default"
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    steps: int = 1000  # optimizer steps; also the length of the cosine schedule
    batch_size: int = 16  # samples per step over ALL processes (each of W processes takes batch_size / W)
    # Packed row length in tokens: samples are packed back to back into rows of at most this many tokens (a longer
    # sample gets a row of its own). 0 = no packing (one sample per row, right padded).
    # On CPU the dense packed mask makes attention slower than padding similar-length samples, hence 0 by default.
    pack_length: int = 0
    attention: str = "rswa"  # "rswa" or "full" (the full-attention twin: every layer full, no window in the mask)
    freeze_encoder: bool = False  # freeze the vision tower (SAM + CLIP); projector and decoder still train
    # Page-anchored rotary ids (model/positions.py): page k's output sits k*stride positions after page 0's, as far
    # from page k's cells as a single page's output is from its page. Written to the exported config.json as
    # ``page_position_stride``, so the engine decodes with the same ids. 0 = sequential ids (the official model).
    page_position_stride: int = 0
    # Tile side with which the exported model reads pages (``reflow_tile`` in its config.json): each page reflowed
    # into tiles of whole lines at native resolution (model/reflow.py), for a model trained on crops of that size.
    # 0 = one view per page (the official scheme, and the bundled model's).
    reflow_tile: int = 0
    # With reflow_tile: every page is scaled so its median text line is this many px tall on the tiles
    # (``reflow_line_height`` in config.json; train on tiles written with the same ``data pdf-pairs
    # --reflow-line-height``). 0 = pages scaled only when their lines are outside 16-25 px.
    reflow_line_height: int = 0
    # Auxiliary loss on the visual tokens (training only; its head is never exported), to make the model READ
    # early instead of learning the language first:
    #   "grid": each visual token predicts the characters drawn in its own cell (from the recorded layout);
    #   "ctc":  the tokens in row-major order emit ctc_frames CTC frames each, the page text is the target;
    #   "none": plain next-token loss only (the baseline).
    aux: str = "grid"
    aux_weight: float = 1.0
    # Guided attention (training only, no parameters): head 0 of every decoder layer learns to attend from each
    # output position to the visual token its character was drawn in (-log of that attention weight). It teaches the
    # decoder WHERE to read instead of waiting for it to discover alignment by itself. 0 disables it.
    guide_weight: float = 0.0
    grid_slots: int = 4  # characters a 32-px cell can hold (+1 terminator); more are dropped from the target
    ctc_frames: int = 8  # frames per visual token: an 8-token row must hold ~25 characters plus blanks
    threads: int = 0  # torch threads per process; 0 = cpu count / processes
    device: str = "cpu"  # "cpu", "cuda" or "auto" (cuda when available); CUDA trains under bfloat16 autocast
    # bfloat16 autocast on the CPU as well (float32 master weights, as on CUDA). It pays where the products are big:
    # a batch of eight 512-px reflow tiles (~8,000 token slots) 1.22-1.47x faster, but the default model's small cards
    # 0.97x (`unlimited-ocr bench train-step`, 2 threads, 2026-12-05), so it is opt-in. A run-time setting: a resumed
    # run may switch it.
    cpu_bf16: bool = False
    # DataLoader processes that render and tokenize the next batches while the model trains (a GPU run on many
    # cores); 0 = build each batch in the training process. Batches are the same either way (exact resume holds).
    workers: int = 0
    seed: int = 0  # model init seed
    log_every: int = 10  # steps between loss records in log.jsonl
    eval_every_s: float = 300.0  # seconds between held-out evals (and best-checkpoint exports)
    eval_every_steps: int = 0  # or every N steps (0 = time based only)
    checkpoint_every_s: float = 300.0  # seconds between resumable checkpoints
    keep_checkpoints: int = 2
    time_budget_s: float = 0.0  # stop (checkpoint + export) after this many seconds of this process; 0 = none
    stop_at: float = 0.0  # unix time to stop at (checkpoint + export); 0 = none
    max_new_tokens: int = 0  # eval decode length; 0 = longest held-out target + 32

    # -- helpers ---------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        data = dict(data)
        model = ModelSettings(**data.pop("model", {}))
        data_settings = _with_tuples(DataSettings, data.pop("data", {}))
        optim = _with_tuples(OptimSettings, data.pop("optim", {}))
        return cls(model=model, data=data_settings, optim=optim, **data)

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _with_tuples(kind, values: dict):
    """JSON turns tuples into lists; give tuple-typed fields their tuples back."""
    fixed = {}
    for item in dataclasses.fields(kind):
        if item.name in values:
            value = values[item.name]
            fixed[item.name] = tuple(value) if isinstance(value, list) and "tuple" in str(item.type) else value
    return kind(**fixed)


def parse_curriculum(schedule: str) -> list[tuple[int, int]]:
    """"0:1,300:2" -> [(0, 1), (300, 2)] sorted by step."""
    pairs = []
    for part in schedule.split(","):
        part = part.strip()
        if not part:
            continue
        step, level = part.split(":")
        pairs.append((int(step), int(level)))
    pairs.sort()
    if not pairs or pairs[0][0] != 0:  # before the first entry: its level (or the full page if empty)
        pairs.insert(0, (0, pairs[0][1] if pairs else 5))
    return pairs


def scheduled_level(schedule: str, step: int) -> int:
    level = 0
    for start, value in parse_curriculum(schedule):
        if step >= start:
            level = value
    return level
