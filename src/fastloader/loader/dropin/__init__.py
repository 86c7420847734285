"""The drop-in loader (DropInLoader): any dataset torch's DataLoader takes, through DataLoader
with tuned defaults. May import loader/factory/ and below."""

# `fastloader.loader.dropin.DropInLoader`, the path the flat layout documented, still imports.
from fastloader.loader.dropin.loader import DropInLoader

__all__ = ["DropInLoader"]
