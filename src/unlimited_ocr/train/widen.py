"""A wider vision tower that starts as the trained narrow one: function-preserving widening (Net2WiderNet).

    unlimited-ocr train --run-dir runs/wide --config-from src/unlimited_ocr/checkpoints/unlimited-ocr-tiny-print/training_config.json \\
        --init-from src/unlimited_ocr/checkpoints/unlimited-ocr-tiny-print --init-widen \\
        --sam-hidden 64 --sam-neck 32 --vision-hidden 128 --encoder-lr-scale 0.5 --data data/real-tiles-g

A fresh wide tower under a trained decoder (``--init-partial``) has to learn to see from scratch: the lineage tried it
once and its auxiliary loss stayed at twice the narrow tower's for 550 steps. Here every channel of the wider tower is
a copy of a trained one, so the widened model computes the same logits as the narrow model before its first step, and
the extra width is free to learn from there.

Each channel "space" of the tower (SAM's residual stream, its MLP hidden layer, its attention heads' dimensions, the
neck, the two downsampling convolutions, the CLIP residual stream = the SAM output, CLIP's MLP, CLIP's heads) grows by
an integer factor ``k``: new channel ``j`` copies old channel ``source[j]``. A layer's weight takes rows from its output
space's copies and columns from its input space's copies; the columns of the ``k`` copies of one input channel are
scaled by fractions that sum to 1, so the layer's output is unchanged. Layer norms see each channel ``k`` times, so
their mean and variance are unchanged. Attention keeps its head count: each head's dimension grows ``k``-fold with its
own dimensions repeated, which multiplies ``q . k`` by ``k`` and the softmax scale by ``1/sqrt(k)``; queries (and SAM's
relative-position tables, which are dotted with the unscaled queries) are scaled by ``1/sqrt(k)`` to give the same
attention logits.

Exact copies receive gradients that are proportional to each other, and AdamW's update does not see a gradient's
scale: copies would stay copies forever. ``noise`` (relative to each weight's own standard deviation) perturbs every
copy but the first, which breaks the symmetry at the price of a tiny change of function (measured by the test).

The learning rate: AdamW moves each of the ``k`` copies about as far per step as it moved the one channel they came
from, and their contributions add up, so the tower's function (and the projector's, whose input columns are split
``k`` ways) changes up to ``k`` times faster than before at the same lr. Train the widened tower at
``--encoder-lr-scale 1/k``. Measured (2026-12-07, the shipped tiny-print model, 28-px tiles, lr 4e-4, the same
batches): widened 2x / 4x / 4x (SAM / neck / CLIP) at the full lr, the cross-entropy ran 0.03-0.08 above the narrow
run's over the first 300 steps; widened 2x everywhere at scale 0.5, it ran level with it (0.534 / 0.583 / 0.541 per
hundred steps against 0.550 / 0.593 / 0.544).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Space:
    """A channel dimension that grew: new channel ``j`` copies old channel ``source[j]``; ``fraction[j]`` is the share
    of that old channel's incoming contribution carried by copy ``j`` (the fractions of one old channel sum to 1)."""

    source: torch.Tensor  # (new,) long
    fraction: torch.Tensor  # (new,) float64
    copy_index: torch.Tensor  # (new,) long: 0 for the first copy of an old channel, 1.. for the added ones

    @property
    def factor(self) -> int:
        return int(self.copy_index.max()) + 1


def repeated_space(old: int, factor: int, generator: torch.Generator, per_head: int | None = None) -> Space:
    """``old`` channels grown ``factor``-fold. ``per_head``: the channels are heads of that many dimensions, and each
    head keeps its place (head h's new dimensions repeat its old ones) so the head count does not change."""
    if per_head is None:
        source = torch.arange(old).repeat(factor)  # (factor * old,): [0..old-1, 0..old-1, ...]
        copy_index = torch.arange(factor).repeat_interleave(old)
    else:
        heads = old // per_head
        within = torch.arange(per_head).repeat(factor)  # one head's new dimensions, (factor * per_head,)
        source = (torch.arange(heads)[:, None] * per_head + within[None, :]).reshape(-1)
        copy_index = torch.arange(factor).repeat_interleave(per_head).repeat(heads)
    shares = torch.rand(factor, old, generator=generator, dtype=torch.float64) + 0.5  # in [0.5, 1.5)
    shares = shares / shares.sum(dim=0, keepdim=True)  # (factor, old): each old channel's copies sum to 1
    fraction = shares[copy_index, source]
    return Space(source, fraction, copy_index)


def identity_space(size: int) -> Space:
    return Space(torch.arange(size), torch.ones(size, dtype=torch.float64), torch.zeros(size, dtype=torch.long))


def concatenated(first: Space, first_old: int, second: Space) -> Space:
    """The space of ``cat([a, b], -1)`` for ``a`` in ``first`` (``first_old`` old channels) and ``b`` in ``second``."""
    return Space(torch.cat([first.source, second.source + first_old]), torch.cat([first.fraction, second.fraction]),
                 torch.cat([first.copy_index, second.copy_index]))


def widen_tensor(value: torch.Tensor, out: Space | None, inp: Space | None = None, out_dim: int = 0,
                 scale: float = 1.0, noise: float = 0.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """``value`` with dimension ``out_dim`` grown along ``out`` (copies) and, for a weight, dimension 1 along ``inp``
    (copies scaled by their fractions). ``noise`` perturbs the added copies of the output channels."""
    wide = value.double()
    if out is not None:
        wide = wide.index_select(out_dim, out.source)
    if inp is not None:
        wide = wide.index_select(1, inp.source)
        shape = [1] * wide.dim()
        shape[1] = -1
        wide = wide * inp.fraction.view(shape)
    wide = wide * scale
    if noise and out is not None:
        spread = float(value.double().std()) if value.numel() > 1 else float(value.double().abs().mean())
        added = (out.copy_index > 0).double()
        shape = [1] * wide.dim()
        shape[out_dim] = -1
        perturbation = torch.randn(wide.shape, generator=generator, dtype=torch.float64) * noise * spread
        wide = wide + perturbation * added.view(shape)
    return wide.to(value.dtype)


def _factor(new: int, old: int, what: str) -> int:
    if new % old or new < old:
        raise ValueError(f"--init-widen: {what} must be a whole multiple of the source's ({new} vs {old})")
    return new // old


def widen_vision_state(state: dict[str, torch.Tensor], source_config, target_config, noise: float = 1e-2,
                       seed: int = 0) -> dict[str, torch.Tensor]:
    """``state`` (a model of ``source_config``) with its vision tower and projector widened to ``target_config``'s.

    Everything else (decoder, embeddings, lm_head, newline and separator vectors) is returned as is. The two configs may
    differ only in the vision widths (SAM hidden size and its MLP, neck channels, downsampling channels, CLIP hidden
    size and its MLP), each a whole multiple of the source's; head counts, layers, patch and window sizes must agree.
    """
    generator = torch.Generator().manual_seed(seed)
    old_sam, new_sam = source_config.vision_config.sam_config, target_config.vision_config.sam_config
    old_clip, new_clip = source_config.vision_config.encoder_config, target_config.vision_config.encoder_config
    for name in ("num_hidden_layers", "num_attention_heads", "patch_size", "window_size", "image_size"):
        if getattr(old_sam, name) != getattr(new_sam, name):
            raise ValueError(f"--init-widen: SAM {name} differs ({getattr(old_sam, name)} vs {getattr(new_sam, name)})")
    for name in ("num_hidden_layers", "num_attention_heads"):
        if getattr(old_clip, name) != getattr(new_clip, name):
            raise ValueError(f"--init-widen: CLIP {name} differs ({getattr(old_clip, name)} vs {getattr(new_clip, name)})")
    if source_config.text_config.hidden_size != target_config.text_config.hidden_size:
        raise ValueError("--init-widen widens the vision tower only; the decoder's hidden size differs")

    k_sam = _factor(new_sam.hidden_size, old_sam.hidden_size, "the SAM width")
    k_sam_mlp = _factor(new_sam.mlp_dim, old_sam.mlp_dim, "the SAM MLP width")
    k_neck = _factor(new_sam.output_channels, old_sam.output_channels, "the neck channels")
    k_down = _factor(new_sam.downsample_channels[0], old_sam.downsample_channels[0], "the first downsampling conv")
    k_clip = _factor(new_clip.hidden_size, old_clip.hidden_size, "the CLIP width")
    k_clip_mlp = _factor(new_clip.intermediate_size, old_clip.intermediate_size, "the CLIP MLP width")
    if _factor(new_sam.downsample_channels[-1], old_sam.downsample_channels[-1], "the SAM output") != k_clip \
            or old_sam.downsample_channels[-1] != old_clip.hidden_size:
        raise ValueError("--init-widen: the SAM output feeds CLIP as its patch embeddings; their widths must grow alike")

    sam_heads, clip_heads = old_sam.num_attention_heads, old_clip.num_attention_heads
    sam_head_dim, clip_head_dim = old_sam.hidden_size // sam_heads, old_clip.hidden_size // clip_heads
    sam_residual = repeated_space(old_sam.hidden_size, k_sam, generator)
    neck = repeated_space(old_sam.output_channels, k_neck, generator)
    down = repeated_space(old_sam.downsample_channels[0], k_down, generator)
    clip_residual = repeated_space(old_clip.hidden_size, k_clip, generator)  # = the SAM output's space
    # Spaces inside a layer (heads, MLP hidden) are built once and shared by every layer of the tower: a layer's
    # incoming and outgoing weights must agree on them, and the noise alone breaks the symmetry between layers' copies.
    sam_heads = repeated_space(old_sam.hidden_size, k_sam, generator, per_head=sam_head_dim)
    sam_head_dims = repeated_space(sam_head_dim, k_sam, generator)  # the relative-position tables' last dimension
    sam_mlp = repeated_space(old_sam.mlp_dim, k_sam_mlp, generator)
    clip_heads = repeated_space(old_clip.hidden_size, k_clip, generator, per_head=clip_head_dim)
    clip_mlp = repeated_space(old_clip.intermediate_size, k_clip_mlp, generator)
    sam_query_scale, clip_query_scale = 1 / math.sqrt(k_sam), 1 / math.sqrt(k_clip)

    out: dict[str, torch.Tensor] = {}
    wide = lambda value, o, i=None, **kw: widen_tensor(value, o, i, noise=noise, generator=generator, **kw)  # noqa: E731
    sam_prefix, clip_prefix = "model.vision_tower.sam_encoder.", "model.vision_tower.vision_encoder."
    for name, value in state.items():
        if name.startswith(sam_prefix):
            key = name[len(sam_prefix):]
            parts = key.split(".")
            if key == "pos_embed":  # (1, H, W, C)
                out[name] = widen_tensor(value, sam_residual, out_dim=3)
            elif key.startswith("patch_embed."):  # conv (C, 3, p, p): the image is not widened
                out[name] = wide(value, sam_residual)
            elif parts[0] == "layers":
                layer = parts[2]
                if layer.startswith("layer_norm"):
                    out[name] = widen_tensor(value, sam_residual)
                elif layer == "attn":
                    if parts[3] in ("rel_pos_h", "rel_pos_w"):  # (2w - 1, head_dim), dotted with unscaled queries
                        out[name] = widen_tensor(value, sam_head_dims, out_dim=1, scale=sam_query_scale)
                    elif parts[3] == "qkv":  # (3C, C): query, key, value stacked
                        blocks = value.chunk(3, dim=0)
                        pieces = [wide(block, sam_heads, sam_residual if value.dim() == 2 else None,
                                       scale=sam_query_scale if index == 0 else 1.0)
                                  for index, block in enumerate(blocks)]
                        out[name] = torch.cat(pieces, dim=0)
                    elif parts[3] == "proj":  # (C, C): heads' outputs -> residual
                        out[name] = wide(value, sam_residual, sam_heads if value.dim() == 2 else None)
                    else:
                        raise KeyError(name)
                elif layer == "mlp":
                    if parts[3] == "lin1":
                        out[name] = wide(value, sam_mlp, sam_residual if value.dim() == 2 else None)
                    else:
                        out[name] = wide(value, sam_residual, sam_mlp if value.dim() == 2 else None)
                else:
                    raise KeyError(name)
            elif key == "neck.conv1.weight":  # (N, C, 1, 1)
                out[name] = wide(value, neck, sam_residual)
            elif key == "neck.conv2.weight":  # (N, N, 3, 3)
                out[name] = wide(value, neck, neck)
            elif key.startswith("neck.layer_norm"):
                out[name] = widen_tensor(value, neck)
            elif key == "proj.conv1.weight":  # (D1, N, 3, 3)
                out[name] = wide(value, down, neck)
            elif key == "proj.conv2.weight":  # (D2, D1, 3, 3): the SAM output = CLIP's patch embeddings
                out[name] = wide(value, clip_residual, down)
            else:
                raise KeyError(f"--init-widen does not know how to widen {name}")
        elif name.startswith(clip_prefix):
            key = name[len(clip_prefix):]
            parts = key.split(".")
            if key == "embeddings.class_embedding":
                out[name] = widen_tensor(value, clip_residual)
            elif key == "embeddings.position_embedding.weight":  # (positions, E)
                out[name] = widen_tensor(value, clip_residual, out_dim=1)
            elif key.startswith("pre_layrnorm.") or key.startswith("post_layernorm.") \
                    or (parts[0] == "encoder" and parts[3].startswith("layer_norm")):
                out[name] = widen_tensor(value, clip_residual)
            elif parts[0] == "encoder" and parts[3] == "self_attn":
                matrix = value.dim() == 2
                if parts[4] in ("q_proj", "k_proj", "v_proj"):
                    scale = clip_query_scale if parts[4] == "q_proj" else 1.0
                    out[name] = wide(value, clip_heads, clip_residual if matrix else None, scale=scale)
                elif parts[4] == "out_proj":
                    out[name] = wide(value, clip_residual, clip_heads if matrix else None)
                else:
                    raise KeyError(name)
            elif parts[0] == "encoder" and parts[3] == "mlp":
                if parts[4] == "fc1":
                    out[name] = wide(value, clip_mlp, clip_residual if value.dim() == 2 else None)
                else:
                    out[name] = wide(value, clip_residual, clip_mlp if value.dim() == 2 else None)
            else:
                raise KeyError(f"--init-widen does not know how to widen {name}")
        elif name.startswith("model.multi_modal_projector."):
            # input = cat([CLIP output without its class token, SAM output]) - both in the CLIP residual's space
            if value.dim() == 2:
                projector_in = concatenated(clip_residual, old_clip.hidden_size, clip_residual)
                out[name] = widen_tensor(value, None, projector_in)
            else:
                out[name] = value.clone()
        else:
            out[name] = value
    return out
