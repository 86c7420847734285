"""The packed loader (PackedLoader: images, fields, boxes, masks over a packed dataset, local or
at a URL) and its object-storage options. May import loader/factory/ and below."""

# `fastloader.loader.packed.PackedLoader`, the path the flat layout documented, still imports.
from fastloader.loader.packed.loader import PackedLoader

__all__ = ["PackedLoader"]
