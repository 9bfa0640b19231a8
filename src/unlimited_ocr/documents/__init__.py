"""Documents: PDF/image inputs, page ranges, blocks, and the markdown/JSON writers."""

from .inputs import (Document, DocumentError, Page, PageSource, expand_inputs, load_document, open_document,
                     parse_page_ranges)
from .writers import DocumentOutput, PageResult, is_done, output_name, write_outputs

__all__ = ["Document", "DocumentError", "DocumentOutput", "Page", "PageResult", "PageSource", "expand_inputs",
           "is_done", "load_document", "open_document", "output_name", "parse_page_ranges", "write_outputs"]
