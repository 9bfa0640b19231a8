"""Training: configs, packing/collation, the trainer (DDP, exact resume, export) and ``unlimited-ocr train``."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from .cli import main as train_main

    return train_main(argv)
