"""FastLoader, the factory, with its loaders: `fastloader.FastLoader` is read from here.

FastLoader (loader/factory/base.py) picks a loader by its path's name; each loader registers its
name when its module is imported. This module imports the loaders of the paths of their own
(packed, DALI, mixed, drop-in), so a FastLoader taken from here (or from `fastloader`) can build
any of them; a loader its own argument chooses (audio=, video=: loader/factory/paths.py) is imported
by FastLoader the first time its path is chosen. The base and the loaders import nothing above
themselves.
"""

from __future__ import annotations

from fastloader.loader.dali.loader import DaliLoader
from fastloader.loader.dropin.loader import DropInLoader
from fastloader.loader.factory.base import FastLoader
from fastloader.loader.mix.loader import MixLoader
from fastloader.loader.packed.loader import PackedLoader

__all__ = ["DaliLoader", "DropInLoader", "FastLoader", "MixLoader", "PackedLoader"]
