"""Shared helpers for the data-engine tests: small clean configs and target parsing."""

from __future__ import annotations

import re

import pytest

from unlimited_ocr.data import DataConfig, DegradeConfig, PageConfig

WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
TAG = re.compile(r"<[^>]+>")


def words_of(text: str) -> set[str]:
    """Vocabulary words in a target or drawn text: HTML tags and <PAGE> removed, lowercased."""
    return set(WORD.findall(TAG.sub(" ", text).lower()))


@pytest.fixture(scope="session")
def clean_config() -> DataConfig:
    """No degradation, frequent page furniture: every drawn pixel comes from the layout."""
    return DataConfig(
        page=PageConfig(running_header_probability=0.7, page_number_probability=0.7),
        degrade=DegradeConfig.none(),
    )


@pytest.fixture(scope="session")
def words_of_text():
    return words_of
