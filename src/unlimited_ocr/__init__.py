"""unlimited-ocr: one-pass multi-page document OCR with R-SWA (a KV cache that never grows)."""

__version__ = "0.1.0"
