"""Real pages with recorded character centres (pdf-pairs --reflow-tile) get the visual-token targets synthetic pages
get: the grid head's characters per cell and the guided-attention cell of each target character (hand-computed)."""

from __future__ import annotations

from PIL import Image

from unlimited_ocr.model.tokenizer import IMAGE, build_char_tokenizer
from unlimited_ocr.train.batch import IGNORE, encode_sample, located_characters


def test_centres_become_grid_and_attention_targets():
    tokenizer = build_char_tokenizer()
    image = Image.new("RGB", (64, 64), (255, 255, 255))  # q = 2: four 32-px cells
    text = "ab\nc"
    centres = [[(10.0, 10.0), (40.0, 12.0), (20.0, 50.0)]]  # a: cell 0, b: cell 1, c: cell 2
    ids = tokenizer(text, add_special_tokens=False).input_ids
    a, b, newline, c = ids
    assert located_characters(text, centres[0], (64, 64), 64, 2, tokenizer) == [(a, 0, 10.0), (b, 1, 40.0),
                                                                                   (c, 2, 20.0)]
    example = encode_sample([image], text, [text], tokenizer, image_size=64, queries_per_side=2, grid_slots=3,
                            guide=True, centres=centres)
    none = tokenizer.pad_token_id
    assert example.grid[0].tolist() == [[a, none, IGNORE], [b, none, IGNORE], [c, none, IGNORE],
                                        [none, IGNORE, IGNORE]]
    image_positions = (example.input_ids == tokenizer.convert_tokens_to_ids(IMAGE)).nonzero().flatten().tolist()
    cell_position = {0: image_positions[0], 1: image_positions[1], 2: image_positions[3]}  # a newline ends row 0
    first = example.reference_length - 1  # this position's label is the first target token
    assert example.attend[first:first + 4].tolist() == [cell_position[0], cell_position[1], IGNORE, cell_position[2]]
    plain = encode_sample([image], text, [text], tokenizer, image_size=64, queries_per_side=2, grid_slots=3,
                          guide=True)
    assert (plain.grid == IGNORE).all() and (plain.attend == IGNORE).all()  # no centres: nothing to learn from
