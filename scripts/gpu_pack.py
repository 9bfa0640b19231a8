"""Pack what a GPU training burst needs into .gpu/ (git-ignored, carried to the device machine), within its limits.

    .venv/bin/python scripts/gpu_pack.py --run runs/real-s1 [--data data/real-pdf] [--data-mb 16]
    # then, with the device tool: run(command="bash scripts/gpu_train.sh ...", carry=[".gpu"])

The device machine has torch and an older transformers but no network, no fonts and no wordfreq, and a call
carries at most 64 MiB. So .gpu/ holds:
* wheels/: transformers 5.23 (pure Python), the version this project pins;
* fonts/: every system face the data engine uses, subset to the tokenizer's alphabet, hinting dropped (fontTools;
  72 MB -> 5 MB; the same faces, rasterised without hinting, so pages look alike but are not bit-identical);
* words.json: wordfreq's English list with frequencies (UOCR_WORD_LIST): the same words as here;
* init/: the run's newest checkpoint (model + auxiliary heads; the optimizer state is left behind: a new stage);
* real/: a size-capped subset of a --data dataset (whole samples, images re-encoded as PNG).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_MB = 60  # the device tool carries 64 MiB in all, the working tree included


def pack_fonts(out: Path) -> int:
    from fontTools import subset

    from unlimited_ocr.data.fonts import expand_families, system_families
    from unlimited_ocr.model.tokenizer import DEFAULT_ALPHABET

    out.mkdir(parents=True, exist_ok=True)
    files = sorted({path for name in expand_families(("system", "system-heldout"))
                    for path in system_families()[name].values()})
    options = subset.Options()
    options.hinting = False
    options.layout_features = ["kern", "liga"]
    options.notdef_outline = True
    options.name_IDs = ["*"]  # keep family and style names: discovery groups faces by them
    unicodes = sorted({ord(c) for c in DEFAULT_ALPHABET + "\u2022\u00a0"})
    for index, path in enumerate(files):
        font = subset.load_font(path, options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=unicodes)
        subsetter.subset(font)
        subset.save_font(font, str(out / f"{index:03d}-{Path(path).name}"), options)
    return len(files)


def pack_words(out: Path) -> None:
    from unlimited_ocr.data.text_source import english_words

    out.write_text(json.dumps(english_words(60_000)), encoding="utf-8")


def pack_checkpoint(run: Path, out: Path) -> str:
    """The run's newest checkpoint; ``run`` may also be a checkpoint folder itself, with the run's config.json in
    its parent, or a shipped lineage folder (src/unlimited_ocr/checkpoints/unlimited-ocr-tiny-print: an export with
    its grid head and the run's config as training_config.json)."""
    if (run / "model.safetensors").exists() and (run / "training_config.json").exists():
        folder, config = run, run / "training_config.json"
    elif (run / "model.safetensors").exists():
        folder, config = run, run.parent / "config.json"
    else:
        folder = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
        config = run / "config.json"
    out.mkdir(parents=True, exist_ok=True)
    for item in folder.glob("*.safetensors"):
        shutil.copy(item, out / item.name)
    (out / "run_config.json").write_text(config.read_text())  # the run's TrainConfig
    return folder.name


def pack_data(source: Path, out: Path, budget_mb: float) -> int:
    """Whole samples of ``source`` in file order until ``budget_mb`` of images is reached."""
    from unlimited_ocr.data.messages import load_messages_dataset, sample_record

    (out / "pages").mkdir(parents=True, exist_ok=True)
    used, lines = 0.0, []
    for sample in load_messages_dataset(source):
        size = sum(Path(path).stat().st_size for path in sample.image_paths) / 2**20
        if used + size > budget_mb:
            continue
        names = []
        for path in sample.image_paths:
            target = out / "pages" / Path(path).name
            if not target.exists():
                shutil.copy(path, target)
            names.append(f"pages/{Path(path).name}")
        used += size
        lines.append(json.dumps(sample_record(names, sample.target, centres=sample.centres), ensure_ascii=False))
    (out / "data.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True,
                        help="run folder whose newest checkpoint the burst continues, or a checkpoint folder")
    parser.add_argument("--data", default=None, help="a messages-JSONL dataset (data pdf-pairs) to carry a part of")
    parser.add_argument("--data-mb", type=float, default=16, help="megabytes of --data images to carry")
    parser.add_argument("--out", default=str(ROOT / ".gpu"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    (out / "wheels").mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(out / "wheels"), "transformers==5.23.0"], check=True)
    print(f"fonts: {pack_fonts(out / 'fonts')} faces")
    pack_words(out / "words.json")
    print(f"checkpoint: {pack_checkpoint(Path(args.run), out / 'init')}")
    if args.data:
        print(f"real data: {pack_data(Path(args.data), out / 'real', args.data_mb)} samples")
    size = megabytes(out)
    print(f"{out}: {size:.1f} MiB")
    if size > LIMIT_MB:
        print(f"error: over the {LIMIT_MB} MiB a device call can carry; lower --data-mb", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
