"""Prefill, R-SWA decode loop, no-repeat rule, streaming and batching."""

from .engine import DecodeOptions, DocumentResult, OcrEngine
from .pages import split_pages

__all__ = ["DecodeOptions", "DocumentResult", "OcrEngine", "split_pages"]
