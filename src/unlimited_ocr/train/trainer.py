"""The training loop: AdamW + warmup/cosine, grad clipping, curriculum, held-out CER, checkpoints, exact resume, DDP.

Run folder layout (``TrainConfig.run_dir``)::

    config.json                 the TrainConfig of the run (resume rebuilds the run from it)
    log.jsonl                   {"kind": "train", step, loss, ce, aux, lr, level, ...} and {"kind": "eval", cer, ...}
    checkpoints/step-0000420/   model.safetensors, aux.safetensors (CTC head), trainer_state.pt (optimizer,
                                scheduler, RNG, step, samples seen = data index, curriculum level, best CER)
    checkpoints/latest          name of the newest complete checkpoint
    export/                     best model so far by held-out CER: save_pretrained + tokenizer (load_model-able)

Data order is a pure function of the sample counter (sample i of the train split at the current level), so a run
resumed from a checkpoint sees exactly the batches it would have seen: same next loss.

Multi-process: under ``torchrun`` (WORLD_SIZE > 1) the TrainingModule is wrapped in DDP over gloo; rank r takes
samples ``counter + r * B/W ... `` of each global batch; rank 0 evaluates, logs, checkpoints and exports, and
broadcasts every time-based decision so all ranks stop, checkpoint and change level together.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file as load_safetensors_file
from safetensors.torch import load_model as load_safetensors_model
from safetensors.torch import save_model as save_safetensors_model

from ..data import SyntheticDocs
from ..model.loading import LoadedModel
from ..model.tokenizer import build_char_tokenizer
from .batch import collate
from .config import TrainConfig, parse_curriculum, scheduled_level
from .modeling import TrainingModule, build_model, load_weights_resizing_views, queries_per_side
from .sources import BatchStream, RealSample, SampleSource
from .widen import widen_vision_state

def eval_level(config: TrainConfig) -> int:
    if config.data.eval_level is not None:
        return config.data.eval_level
    return max(level for _, level in parse_curriculum(config.data.curriculum))


def parameter_groups(module: torch.nn.Module, model, optim) -> list[dict]:
    """AdamW groups: weight decay on matrices (not embeddings, norms or biases); the vision tower at
    lr * optim.encoder_lr_scale. Frozen parameters are left out; empty groups are dropped. The scheduler's
    lambda scales every group's own base lr, so the encoder keeps its fraction along the whole schedule."""
    encoder_ids = {id(p) for p in model.model.vision_tower.parameters()}
    groups: dict[tuple[bool, bool], list] = {}
    for name, parameter in module.named_parameters():
        if not parameter.requires_grad:
            continue
        key = (id(parameter) in encoder_ids, parameter.dim() >= 2 and "embed" not in name)
        groups.setdefault(key, []).append(parameter)
    return [{"params": params, "weight_decay": optim.weight_decay if decays else 0.0,
             "lr": optim.lr * (optim.encoder_lr_scale if encoder else 1.0)}
            # Decoder groups first, decaying before non-decaying: the order of older checkpoints' optimizer state.
            for (encoder, decays), params in sorted(groups.items(), key=lambda item: (item[0][0], not item[0][1]))]


def lr_lambda(optim, steps: int):
    def factor(step: int) -> float:
        if step < optim.warmup_steps:
            return (step + 1) / max(1, optim.warmup_steps)
        progress = min(1.0, (step - optim.warmup_steps) / max(1, steps - optim.warmup_steps))
        return optim.min_lr_ratio + (1 - optim.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def character_error_rate(references: list[str], hypotheses: list[str]) -> float:
    """Corpus CER: total edit distance / total reference characters."""
    from rapidfuzz.distance import Levenshtein

    edits = sum(Levenshtein.distance(r, h) for r, h in zip(references, hypotheses))
    return edits / max(1, sum(len(r) for r in references))


class Trainer:
    def __init__(self, config: TrainConfig, resume: bool = True, init_from: str | None = None,
                 init_partial: bool = False, init_widen: bool = False):
        self.config = config
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("gloo")
        threads = config.threads or max(1, (os.cpu_count() or 1) // self.world)
        torch.set_num_threads(threads)
        if config.batch_size % self.world:
            raise ValueError(f"batch size {config.batch_size} is not a multiple of {self.world} processes")
        self.local_batch = config.batch_size // self.world
        self.run_dir = Path(config.run_dir)
        self.tokenizer = build_char_tokenizer()
        self.model = build_model(config, self.tokenizer)
        # Fine-tune: start from an exported model (same architecture) or from a run's checkpoint folder; the
        # latter also restores the training-only heads, so the auxiliary loss does not restart from a random head.
        # A checkpoint folder has model.safetensors and no config.json (an export has both); its optimizer state
        # (trainer_state.pt) is not needed here and may be left behind (scripts/gpu_pack.py does).
        init_checkpoint = Path(init_from) if init_from and not (Path(init_from) / "config.json").exists() else None
        if init_from and init_checkpoint is None:
            from transformers import UnlimitedOcrForConditionalGeneration

            source = UnlimitedOcrForConditionalGeneration.from_pretrained(init_from)
            state = source.state_dict()
            if init_widen:  # a wider vision tower that starts as the source's trained one (train/widen.py)
                state = widen_vision_state(state, source.config, self.model.config, seed=config.seed)
            load_weights_resizing_views(self.model, state, partial=init_partial)
        elif init_widen:
            raise ValueError("--init-widen needs --init-from an exported model folder (with its config.json)")
        if config.page_position_stride:
            # Saved with the model (config.json), so the engine and every export use the same rotary ids.
            self.model.config.page_position_stride = config.page_position_stride
        if config.reflow_tile:  # likewise: the engine reads pages as reflowed tiles (engine/reflowed.py)
            self.model.config.reflow_tile = config.reflow_tile
            if config.reflow_line_height:
                self.model.config.reflow_line_height = config.reflow_line_height
        self.queries = queries_per_side(self.model)
        self.image_size = int(self.model.config.vision_config.sam_config.image_size)
        window = None if config.attention == "full" else config.model.sliding_window
        use_aux = config.aux_weight > 0
        self.module = TrainingModule(
            self.model, self.tokenizer, window, config.ctc_frames if use_aux and config.aux == "ctc" else 0,
            config.grid_slots if use_aux and config.aux == "grid" else 0,
            guide_head=0 if config.guide_weight > 0 else None,
        )
        if init_checkpoint is not None:
            load_weights_resizing_views(self.model, load_safetensors_file(str(init_checkpoint / "model.safetensors")),
                                        partial=init_partial)
        if init_from:
            # The training-only heads travel beside the weights: in a checkpoint folder, and in a shipped folder
            # that keeps them so a later run continues where the lineage stopped (checkpoints/*-print).
            for kind, head in (("ctc", self.module.ctc_head), ("grid", self.module.grid_head)):
                if head is not None and (Path(init_from) / f"aux-{kind}.safetensors").exists():
                    load_safetensors_model(head, str(Path(init_from) / f"aux-{kind}.safetensors"))
        if config.freeze_encoder:
            for parameter in self.model.model.vision_tower.parameters():
                parameter.requires_grad_(False)
        # CUDA when asked for (or "auto" with a GPU present): the weights stay float32, forwards run under bfloat16
        # autocast; batches are built on the CPU (by --workers processes) and moved over.
        wanted = config.device if config.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(wanted)
        self.module.to(self.device)
        optim = config.optim
        self.optimizer = torch.optim.AdamW(parameter_groups(self.module, self.model, optim),
                                           lr=optim.lr, betas=tuple(optim.betas))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(optim, config.steps))
        self.state = {"step": 0, "samples": 0, "level": scheduled_level(config.data.curriculum, 0),
                      "elapsed_s": 0.0, "best_cer": None, "best_step": None}
        self._heldout: dict[int, list] = {}
        self.source = SampleSource(
            config, self.tokenizer, self.image_size, self.queries,
            grid_slots=config.grid_slots if self.module.grid_head is not None else 0,
            guide=self.module.guide_head is not None, positions=self.loaded_model().positions)
        self.source.load_real_data()
        self.stream = BatchStream(self.source, config.batch_size, self.rank, self.local_batch, workers=config.workers)
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            config.save(self.run_dir / "config.json")
        self._barrier()
        if resume:
            self.load_latest()
        self.ddp = None
        if self.world > 1:
            self.ddp = torch.nn.parallel.DistributedDataParallel(self.module)

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _barrier(self):
        if self.world > 1:
            dist.barrier()

    def _broadcast(self, values: list[float]) -> list[float]:
        if self.world == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.broadcast(tensor, 0)
        return tensor.tolist()

    def log(self, record: dict) -> None:
        if self.rank != 0:
            return
        with open(self.run_dir / "log.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if record.get("kind") == "eval":
            print(f"[eval] step {record['step']} t={record['time_s']:.0f}s level {record['level']} "
                  f"CER {record['cer']:.3f} (eval level {record['eval_level']}: {record['cer_eval_level']:.3f})"
                  + (f" real held-out CE {record['real_heldout_ce']:.3f}" if "real_heldout_ce" in record else ""),
                  flush=True)
        else:
            guide = f" guide {record['guide']:.3f}" if "guide" in record else ""
            print(f"step {record['step']} t={record['time_s']:.0f}s loss {record['loss']:.3f} ce {record['ce']:.3f}"
                  f" aux {record.get('aux', 0):.3f}{guide} lr {record['lr']:.2e} level {record['level']}", flush=True)

    def autocast(self):
        """bfloat16 autocast on CUDA (float32 master weights); on the CPU only with ``cpu_bf16``, else float32."""
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        if self.config.cpu_bf16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def dataset(self, split: str, level: int) -> SyntheticDocs:
        return self.source.dataset(split, level)

    def encode(self, sample):
        return self.source.encode(sample)

    @property
    def positions(self):
        """The model config's rotary ids (set from --page-stride): the same PagePositions the engine decodes with."""
        return self.source.positions

    def batch_for(self, samples_start: int, level: int):
        """This rank's share of the global batch starting at sample ``samples_start`` (built in this process)."""
        return self.source.batch(samples_start + self.rank * self.local_batch, self.local_batch, level)

    @torch.no_grad()
    def real_heldout_ce(self, batch_size: int = 4) -> float | None:
        """Mean next-token cross-entropy on the held-out real samples (teacher forced; None without --data)."""
        if not self.source.real_heldout:
            return None
        was_training = self.module.training
        self.module.eval()
        total, tokens = 0.0, 0
        heldout = self.source.real_heldout
        for start in range(0, len(heldout), batch_size):
            chunk = [self.source.encode(RealSample(item)) for item in heldout[start : start + batch_size]]
            with self.autocast():
                out = self.module(collate(chunk, 0, self.tokenizer.pad_token_id).to(self.device))
            total += float(out["ce_sum"])
            tokens += int(out["tokens"])
        self.module.train(was_training)
        return total / max(tokens, 1)

    # -- one step ------------------------------------------------------------------------------------------------
    def compute_loss(self, batch) -> tuple[torch.Tensor, dict]:
        module = self.ddp if self.ddp is not None else self.module
        out = module(batch)
        ce = out["ce_sum"] / out["tokens"].clamp(min=1)
        loss = ce
        parts = {"ce": ce.item()}
        if "ctc_sum" in out:
            ctc = out["ctc_sum"] / out["ctc_chars"]
            loss = loss + self.config.aux_weight * ctc
            parts["aux"] = ctc.item()
        if "grid_sum" in out:
            grid = out["grid_sum"] / out["grid_count"]
            loss = loss + self.config.aux_weight * grid
            parts["aux"] = grid.item()
        if "guide_sum" in out:
            guide = out["guide_sum"] / out["guide_count"].clamp(min=1)
            loss = loss + self.config.guide_weight * guide
            parts["guide"] = guide.item()
        return loss, parts

    def train_step(self) -> dict:
        """One optimizer step on the next global batch; returns the (rank-averaged) loss parts."""
        self.module.train()
        level = self.state["level"]
        batch = self.stream.next(self.state["samples"], level).to(self.device)
        with self.autocast():
            loss, parts = self.compute_loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.module.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.optim.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.state["step"] += 1
        self.state["samples"] += self.config.batch_size
        parts["loss"] = loss.item()
        if self.world > 1:
            keys = sorted(parts)
            tensor = torch.tensor([parts[k] for k in keys], dtype=torch.float64)
            dist.all_reduce(tensor)
            parts = {k: v / self.world for k, v in zip(keys, tensor.tolist())}
        parts["grad_norm"] = float(grad_norm)
        parts["lr"] = self.scheduler.get_last_lr()[0]
        return parts

    # -- eval ----------------------------------------------------------------------------------------------------
    def loaded_model(self) -> LoadedModel:
        tokenizer = self.tokenizer
        page = tokenizer.convert_tokens_to_ids("<PAGE>")
        return LoadedModel(
            model=self.model, tokenizer=tokenizer, source=str(self.run_dir), image_size=self.image_size,
            queries_per_side=self.queries, tile_size=self.image_size, queries_per_tile_side=0,
            image_token_id=int(self.model.config.image_token_id), page_token_id=page,
            eos_token_id=int(tokenizer.eos_token_id),
        )

    def heldout(self, level: int):
        if level not in self._heldout:
            dataset = self.dataset("heldout", level)
            self._heldout[level] = [dataset.generate(i) for i in range(self.config.data.eval_samples)]
        return self._heldout[level]

    @torch.no_grad()
    def evaluate(self, level: int, batch_size: int = 16) -> tuple[float, list[tuple[str, str]]]:
        """Held-out CER at ``level`` with the inference engine (greedy, R-SWA or full as trained)."""
        from ..engine import DecodeOptions, OcrEngine

        samples = self.heldout(level)
        was_training = self.model.training
        self.model.eval()
        engine = OcrEngine(self.loaded_model())
        longest = max(len(self.tokenizer(s.target, add_special_tokens=False).input_ids) for s in samples)
        options = DecodeOptions(max_new_tokens=self.config.max_new_tokens or longest + 32)
        hypotheses = []
        for start in range(0, len(samples), batch_size):
            chunk = samples[start : start + batch_size]
            results = engine.generate([s.images for s in chunk], options)
            hypotheses.extend(r.text for r in results)
        self.model.train(was_training)
        references = [s.target for s in samples]
        return character_error_rate(references, hypotheses), list(zip(references, hypotheses))[:3]

    def run_eval(self, elapsed: float) -> None:
        """Rank 0: held-out CER at the current level and at the selection level; export when it is the best."""
        level = self.state["level"]
        target_level = eval_level(self.config)
        start = time.perf_counter()
        cer, examples = self.evaluate(level)
        cer_target = cer if target_level == level else self.evaluate(target_level)[0]
        record = {"kind": "eval", "step": self.state["step"], "time_s": elapsed, "samples": self.state["samples"],
                  "level": level, "cer": cer, "eval_level": target_level, "cer_eval_level": cer_target,
                  "eval_seconds": time.perf_counter() - start, "examples": examples}
        real_ce = self.real_heldout_ce()
        if real_ce is not None:
            record["real_heldout_ce"] = real_ce
        best = self.state["best_cer"]
        if best is None or cer_target < best:
            self.state["best_cer"] = cer_target
            self.state["best_step"] = self.state["step"]
            self.export(self.run_dir / "export", {"step": self.state["step"], "cer": cer_target,
                                                  "eval_level": target_level})
            record["exported"] = True
        self.log(record)
        self.state["last_cer"] = cer

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def save_checkpoint(self) -> Path | None:
        if self.rank != 0:
            self._barrier()
            return None
        root = self.checkpoint_dir()
        root.mkdir(parents=True, exist_ok=True)
        name = f"step-{self.state['step']:07d}"
        final = root / name
        tmp = root / (name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_safetensors_model(self.model, str(tmp / "model.safetensors"))
        for kind, head in (("ctc", self.module.ctc_head), ("grid", self.module.grid_head)):
            if head is not None:
                save_safetensors_model(head, str(tmp / f"aux-{kind}.safetensors"))
        torch.save({
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "state": dict(self.state), "config": self.config.to_dict(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
        }, tmp / "trainer_state.pt")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        (root / "latest.tmp").write_text(name)
        os.replace(root / "latest.tmp", root / "latest")
        existing = sorted(p for p in root.glob("step-*") if not p.name.endswith(".tmp"))
        for old in existing[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        self._barrier()
        return final

    def load_latest(self) -> bool:
        pointer = self.checkpoint_dir() / "latest"
        if not pointer.exists():
            return False
        self.load_checkpoint(self.checkpoint_dir() / pointer.read_text().strip())
        return True

    def load_checkpoint(self, folder: Path) -> None:
        load_safetensors_model(self.model, str(folder / "model.safetensors"))
        for kind, head in (("ctc", self.module.ctc_head), ("grid", self.module.grid_head)):
            if head is not None and (folder / f"aux-{kind}.safetensors").exists():
                load_safetensors_model(head, str(folder / f"aux-{kind}.safetensors"))
        saved = torch.load(folder / "trainer_state.pt", weights_only=False, map_location=self.device)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.state.update(saved["state"])
        torch.set_rng_state(saved["rng"]["torch"])
        random.setstate(saved["rng"]["python"])
        np.random.set_state(saved["rng"]["numpy"])
        if self.rank == 0:
            print(f"resumed from {folder} (step {self.state['step']}, samples {self.state['samples']}, "
                  f"level {self.state['level']})", flush=True)

    # -- export --------------------------------------------------------------------------------------------------
    def export(self, folder: Path, info: dict | None = None) -> Path:
        """``save_pretrained`` of the plain model + tokenizer (+ training_config.json), replaced atomically."""
        folder = Path(folder)
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp, safe_serialization=True)
        self.tokenizer.save_pretrained(tmp)
        self.config.save(tmp / "training_config.json")
        (tmp / "export_info.json").write_text(json.dumps({**(info or {}), "time": time.time()}, indent=2))
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)
        return folder

    # -- loop ----------------------------------------------------------------------------------------------------
    def _level_for_step(self) -> int:
        """The schedule's level; with --advance-cer the schedule is a floor that CER-driven advances can pass."""
        scheduled = scheduled_level(self.config.data.curriculum, self.state["step"])
        if self.config.data.advance_cer is None:
            return scheduled
        return max(scheduled, self.state["level"])

    def train(self) -> dict:
        config = self.config
        start = time.time()
        base_elapsed = self.state["elapsed_s"]
        last_eval = last_ckpt = time.time()
        last_parts: dict = {}
        while self.state["step"] < config.steps:
            self.state["level"] = self._level_for_step()
            parts = self.train_step()
            last_parts = parts
            now = time.time()
            elapsed = base_elapsed + now - start
            self.state["elapsed_s"] = elapsed
            step = self.state["step"]
            if step % config.log_every == 0 or step == 1:
                self.log({"kind": "train", "step": step, "time_s": elapsed, "samples": self.state["samples"],
                          "level": self.state["level"], **parts})
            # Time-based decisions come from rank 0 so every rank acts on the same step.
            stop = (config.time_budget_s and now - start >= config.time_budget_s) or (
                config.stop_at and now >= config.stop_at)
            want_eval = (config.eval_every_steps and step % config.eval_every_steps == 0) or (
                config.eval_every_s and now - last_eval >= config.eval_every_s)
            want_ckpt = config.checkpoint_every_s and now - last_ckpt >= config.checkpoint_every_s
            stop, want_eval, want_ckpt = (bool(x) for x in self._broadcast(
                [float(bool(stop)), float(bool(want_eval)), float(bool(want_ckpt))]))
            if want_eval or stop or step >= config.steps:
                self._eval_and_advance(elapsed)
                last_eval = time.time()
            if want_ckpt or stop or step >= config.steps:
                self.save_checkpoint()
                last_ckpt = time.time()
            if stop:
                break
        return {**self.state, **last_parts}

    def _eval_and_advance(self, elapsed: float) -> None:
        if self.rank == 0:
            self.run_eval(elapsed)
        advance = self.config.data.advance_cer
        if advance is not None:
            level = self.state["level"]
            if self.rank == 0 and self.state.get("last_cer", 1.0) < advance:
                level = min(self.config.data.max_level, level + 1)
            self.state["level"] = int(self._broadcast([float(level)])[0])
        values = self._broadcast([self.state["best_cer"] if self.state["best_cer"] is not None else -1.0])
        self.state["best_cer"] = None if values[0] < 0 else values[0]
        self._barrier()

    def close(self) -> None:
        self.stream.close()
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
