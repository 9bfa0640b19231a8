"""Documents: PDF/image inputs, page ranges, blocks, and the markdown/JSON writers."""

from .inputs import Document, DocumentError, Page, expand_inputs, load_document, parse_page_ranges
from .writers import DocumentOutput, PageResult, is_done, output_names, write_outputs

__all__ = ["Document", "DocumentError", "DocumentOutput", "Page", "PageResult", "expand_inputs", "is_done",
           "load_document", "output_names", "parse_page_ranges", "write_outputs"]
