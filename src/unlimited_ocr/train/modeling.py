"""The model being trained: the plain transformers class plus, for training only, an auxiliary CTC head.

``TrainingModule`` is what DDP wraps: its ``forward(batch)`` runs the vision tower on every page, scatters the
visual features into the packed rows, runs the decoder with the packed R-SWA mask (or full causal for the
full-attention twin) and returns the losses. The exported checkpoint is ``module.model`` alone: the CTC head never
leaves the trainer.

Auxiliary "grid" loss (the default): each visual token predicts, through a linear head, the characters drawn
inside its own cell of the page, left to right (up to ``slots - 1``, then a terminator), from the layout the data
engine recorded. A dense, local, alignment-free signal: the encoder learns to carry glyph identity at the right
place within a few hundred steps, and the decoder only has to learn to look it up.

Auxiliary CTC (alternative): the projected visual tokens of a page (the ``q x q`` grid the decoder sees, newline and separator
tokens left out) are read row by row; each token emits ``frames`` CTC frames through a linear head; the page's
text is the target (blank = the pad token). It supervises the encoder directly, so the visual tokens carry
character identity long before the decoder has learnt to look at them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import UnlimitedOcrForConditionalGeneration

from ..model import sam_attention
from ..model.presets import TinyPreset
from ..model.tokenizer import IMAGE
from ..rswa.masks import packed_rswa_mask
from .batch import IGNORE, PackedBatch
from .config import TrainConfig


def build_model(config: TrainConfig, tokenizer) -> UnlimitedOcrForConditionalGeneration:
    """A freshly initialised model (seeded) of ``config.model``'s size, R-SWA or full attention."""
    settings = config.model
    preset = TinyPreset(
        vocab_size=len(tokenizer), hidden_size=settings.hidden_size, num_layers=settings.num_layers,
        num_heads=settings.num_heads, intermediate_size=settings.intermediate_size, num_experts=settings.num_experts,
        experts_per_token=settings.experts_per_token, moe_intermediate_size=settings.moe_intermediate_size,
        sliding_window=settings.sliding_window, image_size=settings.image_size, sam_patch_size=settings.sam_patch_size,
        sam_hidden=settings.sam_hidden, sam_layers=settings.sam_layers, vision_hidden=settings.vision_hidden,
        vision_layers=settings.vision_layers,
    )
    model_config = preset.to_config(
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE), bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        full_attention=config.attention == "full",
    )
    model_config.vision_config.sam_config.window_size = settings.sam_window
    model_config.vision_config.sam_config.global_attn_indexes = list(settings.sam_global_layers)
    # The SAM config ships initializer_range = 1e-10 (its weights are always loaded from SAM): trained from scratch,
    # that leaves the whole SAM branch ~dead (outputs ~1e-20, vanishing gradients) for hundreds of steps - a big
    # part of why a from-scratch model learns the language long before it learns to read. Use 0.02 like the rest.
    model_config.vision_config.sam_config.initializer_range = settings.sam_init_std
    model_config.vision_config.sam_config.output_channels = settings.sam_neck_channels
    torch.manual_seed(config.seed)
    model = UnlimitedOcrForConditionalGeneration._from_config(model_config, attn_implementation="sdpa")
    sam_attention.install(model)  # the same numbers, a faster SAM attention (model/sam_attention.py)
    return model


def queries_per_side(model: UnlimitedOcrForConditionalGeneration) -> int:
    sam = model.config.vision_config.sam_config
    size = sam.image_size if isinstance(sam.image_size, int) else sam.image_size[0]
    patch = sam.patch_size if isinstance(sam.patch_size, int) else sam.patch_size[0]
    return int(size) // int(patch) // 4


class TrainingModule(nn.Module):
    """Model + optional CTC head; ``forward(batch)`` -> losses. DDP wraps this."""

    def __init__(self, model: UnlimitedOcrForConditionalGeneration, tokenizer, window: int | None,
                 ctc_frames: int = 0, grid_slots: int = 0, guide_head: int | None = None):
        super().__init__()
        self.model = model
        self.window = window  # None: full causal (the full-attention twin)
        self.image_token_id = int(model.config.image_token_id)
        self.blank = int(tokenizer.pad_token_id)
        self.special_ids = set(tokenizer.all_special_ids)
        self.tokenizer = tokenizer
        self.queries = queries_per_side(model)
        self.ctc_frames = ctc_frames
        hidden = model.config.text_config.hidden_size
        self.ctc_head = nn.Linear(hidden, ctc_frames * len(tokenizer)) if ctc_frames > 0 else None
        self.grid_slots = grid_slots
        self.grid_head = nn.Linear(hidden, grid_slots * len(tokenizer)) if grid_slots > 0 else None
        # Guided attention: head ``guide_head`` of every decoder layer is taught to attend, from each output position,
        # to the visual token its next character was drawn in. Queries/keys are captured from q_proj/k_proj (forward
        # hooks, so the model's own sdpa path runs unchanged) and rotated with the model's own RoPE.
        self.guide_head = guide_head
        self._captured: dict[tuple[int, str], torch.Tensor] = {}
        if guide_head is not None:
            for index, layer in enumerate(model.model.language_model.layers):
                for name in ("q_proj", "k_proj"):
                    getattr(layer.self_attn, name).register_forward_hook(self._capture_hook(index, name))

    def _capture_hook(self, layer_index: int, name: str):
        def hook(module, inputs, output):
            if self._capturing:
                self._captured[(layer_index, name)] = output
        return hook

    _capturing = False

    def guided_attention_loss(self, attend: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor,
                              sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum over layers and supervised positions of -log p(attend to the drawn cell), and the position count."""
        from transformers.models.unlimited_ocr.modeling_unlimited_ocr import apply_rotary_pos_emb

        config = self.model.config.text_config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rows, positions = (attend != IGNORE).nonzero(as_tuple=True)  # (N,), (N,) row-major: each row's run together
        targets = attend[rows, positions]  # (N,) key index within the row
        per_row = torch.bincount(rows, minlength=attend.shape[0]).tolist()  # supervised queries of each row
        visible = mask[rows, 0, positions]  # (N, T) the keys each supervised query may see
        total = cos.new_zeros(())
        h = self.guide_head
        for layer_index in range(len(self.model.model.language_model.layers)):
            q = self._captured[(layer_index, "q_proj")]  # (R, T, H*D)
            k = self._captured[(layer_index, "k_proj")]
            q = q.view(*q.shape[:2], -1, head_dim)[:, :, h].unsqueeze(1)  # (R, 1, T, D)
            k = k.view(*k.shape[:2], -1, head_dim)[:, :, h].unsqueeze(1)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            # Only the supervised queries are scored, each row's against that row's keys: (N_r, D) @ (D, T) per row.
            # Scoring every query ((R, T, T), then picking) cost a third more products and a (R, T, T) gather in
            # backward; gathering the keys per query instead ((N, T, D), kept for backward) took gigabytes on 20-page
            # rows.
            chosen = q[:, 0][rows, positions].split(per_row)  # R pieces of (N_r, D)
            scores = torch.cat([part @ keys.transpose(0, 1) for part, keys in zip(chosen, k[:, 0])])  # (N, T)
            scores = scores.float() * head_dim**-0.5
            scores = scores.masked_fill(~visible, float("-inf"))
            total = total + F.cross_entropy(scores, targets, reduction="sum")
        self._captured.clear()
        return total, torch.tensor(len(targets) * len(self.model.model.language_model.layers))

    def ctc_targets(self, texts: list[str]) -> list[list[int]]:
        targets = []
        for text in texts:
            ids = self.tokenizer(text, add_special_tokens=False).input_ids
            targets.append([i for i in ids if i not in self.special_ids])
        return targets

    def forward(self, batch: PackedBatch, with_token_losses: bool = False) -> dict[str, torch.Tensor]:
        model = self.model
        language_model = model.model.language_model
        features = model.model.get_image_features(batch.pixel_values, return_dict=True).pooler_output  # [(N, D)]
        embeds = language_model.embed_tokens(batch.input_ids)  # (R, T, D)
        slots = (batch.input_ids == self.image_token_id).unsqueeze(-1)
        visual = torch.cat(features).to(embeds.dtype)
        embeds = embeds.masked_scatter(slots, visual)
        mask = packed_rswa_mask(batch.sample_ids, batch.position_ids, batch.reference_lengths, self.window)
        rope_ids = batch.rope_position_ids if batch.rope_position_ids is not None else batch.position_ids  # (R, T)
        guide = self.guide_head is not None and batch.attend is not None and self.training
        self._capturing = guide
        try:
            hidden = language_model(
                inputs_embeds=embeds, attention_mask={"reference_sliding_attention": mask, "full_attention": mask},
                position_ids=rope_ids,
            ).last_hidden_state
        finally:
            self._capturing = False
        selected = batch.labels != IGNORE
        logits = model.lm_head(hidden[selected]).float()  # (N_out, V)
        token_losses = F.cross_entropy(logits, batch.labels[selected], reduction="none")
        out = {"ce_sum": token_losses.sum(), "tokens": selected.sum()}
        if with_token_losses:
            out["token_losses"] = token_losses
            out["token_samples"] = batch.sample_ids[selected]
        if guide:
            cos, sin = language_model.rotary_emb(embeds, position_ids=rope_ids)  # (R, T, D) each
            out["guide_sum"], out["guide_count"] = self.guided_attention_loss(batch.attend, mask, cos, sin)
        q = self.queries
        if self.ctc_head is not None or self.grid_head is not None:
            grids = torch.stack([f[: q * (q + 1)].view(q, q + 1, -1)[:, :q].reshape(q * q, -1) for f in features])
        if self.grid_head is not None and batch.grid is not None:
            slots = self.grid_head(grids).view(-1, len(self.tokenizer)).float()  # (P*q*q*slots, V)
            targets = batch.grid.reshape(-1)
            out["grid_sum"] = F.cross_entropy(slots, targets, ignore_index=IGNORE, reduction="sum")
            out["grid_count"] = (targets != IGNORE).sum().clamp(min=1)
        if self.ctc_head is not None:
            frames = self.ctc_head(grids).view(grids.shape[0], q * q * self.ctc_frames, -1)  # (P, F, V)
            log_probs = frames.float().log_softmax(-1).transpose(0, 1)  # (F, P, V)
            targets = self.ctc_targets(batch.page_texts)
            lengths = torch.tensor([len(t) for t in targets], dtype=torch.long)
            flat = torch.tensor([i for t in targets for i in t], dtype=torch.long)
            inputs = torch.full((grids.shape[0],), log_probs.shape[0], dtype=torch.long)
            ctc = F.ctc_loss(log_probs, flat, inputs, lengths, blank=self.blank, reduction="sum", zero_infinity=True)
            out["ctc_sum"] = ctc
            out["ctc_chars"] = lengths.sum().clamp(min=1)
        return out


def load_weights_resizing_views(model: UnlimitedOcrForConditionalGeneration, state: dict[str, torch.Tensor],
                                partial: bool = False) -> list[str]:
    """Load ``state`` into ``model``; SAM's absolute position grid is resized when the view size changed.

    A stage that trains at another ``image_size`` (e.g. 512-px crops, then 1536-px pages) keeps every weight: only
    ``pos_embed`` depends on the view size (windowed attention's relative tables depend on the window), and it is
    resized the way transformers resizes it at run time (bicubic, antialiased). Returns the resized names.

    ``partial``: a model of another shape (e.g. a wider vision tower under a trained decoder) takes the weights whose
    names and shapes match and keeps its fresh initialisation for the rest, which are printed. Without it any other
    difference is an error, as ``load_state_dict`` says.
    """
    own = model.state_dict()
    resized = []
    state = dict(state)
    for name, value in list(state.items()):
        if name in own and own[name].shape != value.shape and name.endswith("pos_embed") and value.dim() == 4 \
                and own[name].shape[-1] == value.shape[-1]:
            grid = F.interpolate(value.permute(0, 3, 1, 2).float(), size=tuple(own[name].shape[1:3]), mode="bicubic",
                                 align_corners=False, antialias=True)  # (1, C, H, W)
            state[name] = grid.permute(0, 2, 3, 1).to(value.dtype).contiguous()  # (1, H, W, C)
            resized.append(name)
    if partial:
        kept = {name: value for name, value in state.items() if name in own and own[name].shape == value.shape}
        fresh = sorted(name for name in own if name not in kept)
        if fresh:
            print(f"init: {len(kept)} tensors loaded, {len(fresh)} start fresh: "
                  + ", ".join(fresh[:8]) + (" ..." if len(fresh) > 8 else ""), flush=True)
        model.load_state_dict(kept, strict=False)
        return resized
    model.load_state_dict(state)
    return resized

