"""The DALI backend (DaliLoader, backend="dali"): planned crops fed into NVIDIA DALI's graph, its
records checked and refused as the packed loader's. May import loader/factory/ and below."""

# `fastloader.loader.dali.DaliLoader`, the path the flat layout documented, still imports.
from fastloader.loader.dali.loader import DaliLoader

__all__ = ["DaliLoader"]
