"""R-SWA, the mechanism: masks (dense, packed, FlexAttention) and the static cache. Knows nothing about OCR."""

from .cache import RSWACache
from .masks import dense_rswa_reference, packed_rswa_mask, packing_metadata, rswa_mask, rswa_mask_mod, to_additive

__all__ = ["RSWACache", "dense_rswa_reference", "packed_rswa_mask", "packing_metadata", "rswa_mask", "rswa_mask_mod",
           "to_additive"]
