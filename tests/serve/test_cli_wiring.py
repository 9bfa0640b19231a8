"""The CLI entry points: ``parse --server`` writes what local ``parse`` writes; ``serve``, ``batch`` and
``bench serve`` parse their arguments. Skipped until cli.py wires them in."""

from __future__ import annotations

import json

import pytest

from tests.conftest import expected_exit, random_pages
from unlimited_ocr import cli
from unlimited_ocr.runtime import EngineSpec, build_engine
from unlimited_ocr.serve.server import ServerThread, create_app


def _wired() -> bool:
    try:
        cli.main(["serve", "--help"])
    except SystemExit as exit_:
        return exit_.code == 0
    return False


pytestmark = pytest.mark.skipif(not _wired(), reason="serve/batch/--server are not wired into cli.py yet")


def test_parse_with_server_writes_the_same_files_as_local_parse(tiny_checkpoint, tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    first, second = random_pages(2, seed=61, size=(240, 180))
    first.save(inputs / "one.png")
    first.save(inputs / "two.pdf", save_all=True, append_images=[second])
    common = [str(inputs), "--max-new-tokens", "10", "--quiet"]
    local_code = cli.main(["parse", *common, "-o", str(tmp_path / "local"), "--model", str(tiny_checkpoint)])
    assert local_code == expected_exit(*(tmp_path / "local" / "in").glob("*.json"))
    # The server's engine is built like parse builds its own (float32, batch of one): the same numbers.
    engine = build_engine(EngineSpec(model=str(tiny_checkpoint), device="cpu"))
    # Served under the checkpoint's path, so the "model" field of both JSON files names the same thing.
    with ServerThread(create_app(engine, model_name=engine.loaded.source)) as server:
        assert cli.main(["parse", *common, "-o", str(tmp_path / "remote"), "--server", server.url]) == local_code
    for name in ("in/one.png", "in/two"):
        assert (tmp_path / "remote" / f"{name}.md").read_text() == (tmp_path / "local" / f"{name}.md").read_text()
        local, remote = (json.loads((tmp_path / side / f"{name}.json").read_text()) for side in ("local", "remote"))
        for timing in ("prefill_seconds", "decode_seconds"):
            local.pop(timing), remote.pop(timing)
        assert remote == local


def test_unreachable_server_is_a_usage_error(tmp_path):
    page = tmp_path / "page.png"
    random_pages(1, seed=62)[0].save(page)
    assert cli.main(["parse", str(page), "-o", str(tmp_path / "out"), "--server", "http://127.0.0.1:9"]) == 2


@pytest.mark.parametrize("argv", [["batch", "--help"], ["bench", "serve", "--help"]])
def test_subcommands_have_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 0 and "usage" in capsys.readouterr().out
