"""Page-anchored rotary ids: identical to sequential ids on one page; on page k, the same distance to page k's
cells as page 0's output has to page 0's cells; training and decoding share one definition."""

import pytest
import torch

from unlimited_ocr.model.positions import PageCounter, PagePositions
from unlimited_ocr.model.prompt import build_input_ids
from unlimited_ocr.model.tokenizer import IMAGE, PAGE, build_char_tokenizer

TOKENIZER = build_char_tokenizer()
IMAGE_ID = TOKENIZER.convert_tokens_to_ids(IMAGE)
PAGE_ID = TOKENIZER.convert_tokens_to_ids(PAGE)


def scheme(stride):
    return PagePositions(stride=stride, image_token_id=IMAGE_ID, page_token_id=PAGE_ID)


def document(pages: int, per_page: int, output: str):
    prompt = build_input_ids(TOKENIZER, [per_page] * pages)
    target = torch.tensor(TOKENIZER(output, add_special_tokens=False).input_ids)
    return prompt, torch.cat([prompt, target])


def test_sequential_ids_are_the_index():
    prompt, sequence = document(3, 10, "<PAGE>ab<PAGE>cd<PAGE>e")
    ids = scheme(None).sequence(sequence, prompt.shape[0], [10, 10, 10])
    assert ids.tolist() == list(range(sequence.shape[0]))


def test_anchored_single_page_equals_sequential():
    prompt, sequence = document(1, 10, "abc def\nghi")
    anchored = scheme(64).sequence(sequence, prompt.shape[0], [10])
    assert anchored.tolist() == list(range(sequence.shape[0]))


def test_each_page_sits_as_far_from_its_output_as_page_zero():
    pages, per_page, stride = 4, 10, 64
    prompt, sequence = document(pages, per_page, "<PAGE>abc<PAGE>de<PAGE>fghij<PAGE>k")
    ids = scheme(stride).sequence(sequence, prompt.shape[0], [per_page] * pages)
    first_image = int((prompt == IMAGE_ID).nonzero()[0])
    page_starts = [int(ids[first_image + k * per_page]) for k in range(pages)]
    opens = [int(ids[i]) for i in (sequence == PAGE_ID).nonzero().flatten()]  # position of each fed <PAGE>
    assert len(opens) == pages
    distances = [opened - start for opened, start in zip(opens, page_starts)]
    assert distances == [distances[0]] * pages  # page k is read from exactly where page 0 is read
    assert page_starts == [page_starts[0] + k * stride for k in range(pages)]
    output = ids[prompt.shape[0]:]
    assert bool((output[1:] > output[:-1]).all())  # output ids keep increasing
    # BOS and page 0 keep their sequential ids, the instruction follows page 0, the first <PAGE> follows it.
    assert ids[: first_image + per_page].tolist() == list(range(first_image + per_page))
    tail = prompt.shape[0] - first_image - pages * per_page
    assert ids[prompt.shape[0] - tail: prompt.shape[0]].tolist() == list(range(first_image + per_page,
                                                                             first_image + per_page + tail))
    assert opens[0] == first_image + per_page + tail


def test_output_ids_follow_the_pages_by_hand():
    """<PAGE>ab<PAGE>cd<PAGE>e on 3 pages, stride 64: each marker begins page m at anchor + (m-1)*64 + 1, every
    other token one after the previous (worked out by hand, relative to the prompt's last position)."""
    prompt, sequence = document(3, 10, "<PAGE>ab<PAGE>cd<PAGE>e")
    positions = scheme(64)
    ids = positions.sequence(sequence, prompt.shape[0], [10] * 3).tolist()
    anchor = ids[prompt.shape[0] - 1]
    assert [i - anchor for i in ids[prompt.shape[0]:]] == [1, 2, 3, 65, 66, 67, 129, 130]
    # Sequential ids (the official model): simply one after another.
    flat = PagePositions(stride=None, image_token_id=positions.image_token_id, page_token_id=positions.page_token_id)
    assert flat.sequence(sequence, prompt.shape[0], [10] * 3).tolist() == list(range(sequence.shape[0]))


def test_page_counter_counts_an_unmarked_start_as_page_one():
    counter = PageCounter(page_token_id=5)
    assert counter.begun == 0
    for token, begun in [(9, 1), (9, 1), (5, 2), (9, 2), (5, 3)]:
        counter.count(token)
        assert counter.begun == begun
    marked = PageCounter(page_token_id=5)
    for token, begun in [(5, 1), (9, 1), (5, 2)]:
        marked.count(token)
        assert marked.begun == begun


def test_output_that_skips_the_first_marker_still_moves_to_the_next_page():
    """The official format puts <PAGE> before page 0 too; a model that starts with text instead has begun page 0,
    so its first <PAGE> opens page 1 (not page 0 again: that made the bundled model read the demo's page 1 twice)."""
    pages, per_page, stride = 3, 10, 64
    positions = scheme(stride)
    prompt, marked = document(pages, per_page, "<PAGE>ab<PAGE>cd<PAGE>e")
    _, unmarked = document(pages, per_page, "ab<PAGE>cd<PAGE>e")
    marked_ids = positions.sequence(marked, prompt.shape[0], [per_page] * pages)[prompt.shape[0]:].tolist()
    unmarked_ids = positions.sequence(unmarked, prompt.shape[0], [per_page] * pages)[prompt.shape[0]:].tolist()
    anchor = int(positions.reference(prompt, [per_page] * pages)[-1])
    assert unmarked_ids[:2] == [anchor + 1, anchor + 2]  # page 0's text right after the prompt, as on one page
    assert unmarked_ids[2] == anchor + stride + 1  # its first <PAGE> opens page 1
    assert unmarked_ids[2:] == marked_ids[3:]  # from there on, the same ids as with the first marker


def test_stride_too_small_is_refused():
    prompt, _ = document(2, 40, "")
    with pytest.raises(ValueError, match="stride"):
        scheme(32).reference(prompt, [40, 40])
    with pytest.raises(ValueError, match="stride"):
        scheme(45).reference(prompt, [40, 40])  # page 0 + the instruction overflow into page 1
