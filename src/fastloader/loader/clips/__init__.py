"""The loaders of timed clips (ClipLoader; AudioLoader and VideoLoader, each with its kind's
batch decoder) on the one producer. May import loader/factory/ and below."""

# `fastloader.loader.clips.ClipLoader`, the path the flat layout documented, still imports.
from fastloader.loader.clips.loader import ClipLoader

__all__ = ["ClipLoader"]
