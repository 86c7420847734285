"""The mixed loader (MixLoader): the packed loader over a weighted mix of packed datasets. May
import loader/packed/ and below."""

# `fastloader.loader.mix.MixLoader`, the path the flat layout documented, still imports.
from fastloader.loader.mix.loader import MixLoader

__all__ = ["MixLoader"]
