"""System fonts for real-looking pages: discovery groups styles into families, keeps only faces that draw Latin
text, holds out a stable share of families, and "system" pages render with the discovered files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from unlimited_ocr.data import DataConfig, DegradeConfig, PageConfig, SyntheticDocs
from unlimited_ocr.data import fonts
from unlimited_ocr.data.fonts import (BOLD, BOLD_ITALIC, ITALIC, REGULAR, SYSTEM_PREFIX, expand_families,
                                      font_split, system_families)


@pytest.fixture
def font_dir(tmp_path, monkeypatch):
    """A fake system font folder: DejaVu Sans in four styles, DejaVu Serif regular only, a non-font file."""
    source = Path(fonts.font_directory())
    folder = tmp_path / "fonts" / "truetype"
    folder.mkdir(parents=True)
    for name in ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf",
                 "DejaVuSerif.ttf"):
        shutil.copy(source / name, folder / name)
    (folder / "README.ttf").write_text("not a font")
    monkeypatch.setattr(fonts, "SYSTEM_FONT_DIRS", (str(tmp_path / "fonts"),))
    system_families.cache_clear()
    expand_families.cache_clear()
    yield folder
    system_families.cache_clear()
    expand_families.cache_clear()


def test_discovery_groups_styles_and_falls_back_to_regular(font_dir):
    found = system_families()
    assert set(found) == {SYSTEM_PREFIX + "DejaVu Sans", SYSTEM_PREFIX + "DejaVu Serif"}
    sans = found[SYSTEM_PREFIX + "DejaVu Sans"]
    assert [Path(sans[style]).name for style in (REGULAR, BOLD, ITALIC, BOLD_ITALIC)] == [
        "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf"]
    serif = found[SYSTEM_PREFIX + "DejaVu Serif"]
    assert {Path(path).name for path in serif.values()} == {"DejaVuSerif.ttf"}  # every style falls back


def test_split_is_a_stable_hash_and_expansion_follows_it(font_dir):
    names = [name[len(SYSTEM_PREFIX):] for name in system_families()]
    train = [name for name in names if font_split(name) == "train"]
    assert expand_families(("system",)) == tuple(SYSTEM_PREFIX + name for name in train)
    assert font_split("DejaVu Sans") == font_split("DejaVu Sans")  # no dependence on what else is installed
    # About 10% of many names are held out.
    share = sum(font_split(f"Family {i}") == "heldout" for i in range(2000)) / 2000
    assert 0.07 < share < 0.13
    assert expand_families(("mono", "system")) == ("mono", *expand_families(("system",)))


def test_no_system_fonts_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(fonts, "SYSTEM_FONT_DIRS", (str(tmp_path / "none"),))
    system_families.cache_clear()
    expand_families.cache_clear()
    try:
        with pytest.raises(ValueError, match="install_fonts.sh"):
            expand_families(("system",))
    finally:
        system_families.cache_clear()
        expand_families.cache_clear()


def test_system_pages_render_with_the_discovered_faces(font_dir):
    train = expand_families(("system",))
    assert len(train) == 2  # both fake families hash into the training split
    config = DataConfig(page=PageConfig(width=320, height=320, font_families=("system",), body_font_size=(18, 22)),
                        degrade=DegradeConfig.none())
    docs = SyntheticDocs(config, split="train", seed=0, mix="single")
    families = {line.font.family for index in range(6) for line in docs.generate(index).layouts[0].lines}
    assert families and families <= set(train)
    assert docs.generate(3).target == docs.generate(3).target  # deterministic
