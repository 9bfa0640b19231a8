"""Guided attention: the alignment targets point at the cell each character was drawn in, and the loss is exactly
-log of head 0's attention weight on that visual token, summed over layers (checked against eager attention)."""

import torch
from transformers import UnlimitedOcrForConditionalGeneration

from unlimited_ocr.rswa.masks import to_additive
from unlimited_ocr.train.batch import IGNORE, collate


def _trainer(make_config, **overrides):
    from unlimited_ocr.train.trainer import Trainer

    config = make_config(aux="grid", guide_weight=1.0, grid_slots=32, **overrides)
    config.data.curriculum = "0:2"
    return Trainer(config, resume=False)


def test_alignment_targets_point_at_the_cell_of_the_character(make_config):
    trainer = _trainer(make_config)
    dataset = trainer.dataset("train", 2)
    q = trainer.queries
    matched = total = 0
    for index in range(4):
        example = trainer.encode(dataset.generate(index))
        image_positions = (example.input_ids == trainer.module.image_token_id).nonzero().flatten().tolist()
        for position in (example.attend != IGNORE).nonzero().flatten().tolist():
            key = int(example.attend[position])
            slot = image_positions.index(key)  # the key is a visual token of page 0...
            row, column = divmod(slot, q + 1)
            assert column < q  # ...and not a newline or the view separator
            cell_chars = example.grid[0, row * q + column].tolist()
            assert int(example.labels[position]) in cell_chars  # the label was drawn in that cell
        target = trainer.tokenizer(example.target, add_special_tokens=False).input_ids
        total += sum(1 for char in example.target if not char.isspace())
        matched += int((example.attend != IGNORE).sum())
        assert len(target) == len(example.target)
    assert matched / total > 0.95  # nearly every drawn character is supervised


def test_guided_loss_equals_minus_log_attention_weight(make_config):
    trainer = _trainer(make_config)
    module = trainer.module.train()
    dataset = trainer.dataset("train", 2)
    examples = [trainer.encode(dataset.generate(i)) for i in range(3)]
    batch = collate(examples, pack_length=2 * max(e.length for e in examples), pad_token_id=trainer.tokenizer.pad_token_id)
    assert batch.input_ids.shape[0] < len(examples)  # packed: key indices are shifted per sample
    captured = {}
    language_model = module.model.model.language_model
    hook = language_model.register_forward_pre_hook(
        lambda mod, args, kwargs: captured.update(kwargs), with_kwargs=True)
    with torch.no_grad():
        out = module(batch)
    hook.remove()
    eager = UnlimitedOcrForConditionalGeneration._from_config(module.model.config, attn_implementation="eager")
    eager.load_state_dict(module.model.state_dict())
    mask = to_additive(captured["attention_mask"]["reference_sliding_attention"], torch.float32)  # eager adds it
    with torch.no_grad():
        attentions = eager.model.language_model(
            inputs_embeds=captured["inputs_embeds"],
            attention_mask={"reference_sliding_attention": mask, "full_attention": mask},
            position_ids=captured["position_ids"], output_attentions=True,
        ).attentions  # per layer (R, H, T, T)
    rows, positions = (batch.attend != IGNORE).nonzero(as_tuple=True)
    keys = batch.attend[rows, positions]
    expected = sum(-torch.log(weights[rows, 0, positions, keys]).sum() for weights in attentions)
    torch.testing.assert_close(out["guide_sum"], expected.to(out["guide_sum"].dtype), rtol=1e-4, atol=1e-3)
    assert int(out["guide_count"]) == len(keys) * len(attentions) > 0


def test_prefix_advances_equal_every_prefix_length():
    """The O(n) prefix advances (cached characters and kerning pairs) equal PIL's length of every prefix, in the
    fonts the data uses, kerned pairs included."""
    import random

    from unlimited_ocr.data.fonts import BOLD, FAMILIES, REGULAR, load_font
    from unlimited_ocr.train.batch import prefix_advances

    rng = random.Random(0)
    texts = ["AVAWAYToTaWaVoLT", "Kerning: \"fi\" ff, 1,234.56; (x) AV Yo", "office affluent WAVE typography"]
    checked = 0
    for family in FAMILIES[:6]:
        for style in (REGULAR, BOLD):
            try:
                font = load_font(family, style, rng.randint(9, 40))
            except (ValueError, OSError):
                continue
            for text in texts + ["".join(rng.choice(texts[1] + texts[2]) for _ in range(50))]:
                expected = [font.getlength(text[:end]) for end in range(len(text) + 1)]
                assert prefix_advances(font, text) == expected
                assert prefix_advances(font, text) == expected  # again, from the cache
                checked += 1
    assert checked >= 8
