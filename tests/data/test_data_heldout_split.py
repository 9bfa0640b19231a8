"""Held-out text uses only words that never appear in training text."""

from __future__ import annotations

from unlimited_ocr.data import HELDOUT, TRAIN, DataConfig, SyntheticDocs, TextConfig, load_vocabulary, split_of_word


def vocabulary(split: str, config: TextConfig = TextConfig()):
    return load_vocabulary(
        split,
        config.vocabulary_size,
        config.heldout_percent,
        config.max_word_length,
        config.frequency_exponent,
        config.shared_top_words,
    )


def test_vocabularies_are_disjoint_and_sized():
    train, heldout = set(vocabulary(TRAIN).words), set(vocabulary(HELDOUT).words)
    assert not train & heldout
    assert len(train) > 15_000 and len(heldout) > 1_500
    share = len(heldout) / (len(train) + len(heldout))
    assert 0.07 < share < 0.13  # heldout_percent=10 by a hash: close to 10 %
    assert all(split_of_word(word, 10) == HELDOUT for word in list(heldout)[:500])


def test_split_is_a_fixed_function_of_the_word():
    # crc32(word) % 100 < 10 → held-out. Pinned: a change here silently mixes the splits of old runs.
    expected = {"the": TRAIN, "of": HELDOUT, "and": TRAIN, "house": TRAIN, "river": HELDOUT, "model": HELDOUT}
    assert {word: split_of_word(word, 10) for word in expected} == expected


def test_shared_top_words_are_in_both_splits_only():
    config = TextConfig(shared_top_words=100)
    train, heldout = vocabulary(TRAIN, config), vocabulary(HELDOUT, config)
    common = set(train.words) & set(heldout.words)
    assert len(common) == 100 and {"the", "of", "and"} <= common
    assert set(train.words[:100]) == common == set(heldout.words[:100])


def test_generated_text_stays_in_its_split(clean_config, words_of_text):
    """Every word of every target and every drawn line (furniture included) belongs to the sample's split."""
    for split in (TRAIN, HELDOUT):
        own = vocabulary(split)
        other = set(vocabulary(HELDOUT if split == TRAIN else TRAIN).words)
        dataset = SyntheticDocs(clean_config, split=split, seed=5)
        seen: set[str] = set()
        for index in range(60):
            sample = dataset[index]
            seen |= words_of_text(sample.target)
            for layout in sample.layouts:
                for line in layout.lines:
                    seen |= words_of_text(line.text)
        assert len(seen) > 300
        assert not seen & other, sorted(seen & other)[:10]
        assert all(word in own for word in seen)


def test_random_words_mode_is_uniform():
    """random_words_probability=1: rare words are as common as frequent ones (no language-model prior)."""
    config = DataConfig(text=TextConfig(random_words_probability=1.0))
    natural = DataConfig(text=TextConfig(random_words_probability=0.0))
    train = vocabulary(TRAIN)
    top = set(train.words[:200])

    def top_share(data_config) -> float:
        dataset = SyntheticDocs(data_config, seed=1, mix="single")
        tokens = [w.lower() for i in range(40) for w in dataset[i].target.replace("#", " ").split()]
        words = [w.strip(".,;:?!()") for w in tokens]
        return sum(word in top for word in words) / max(1, len(words))

    assert top_share(config) < 0.05 < top_share(natural)
