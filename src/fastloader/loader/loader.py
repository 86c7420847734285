"""FastLoader, the factory, with its loaders: `fastloader.FastLoader` is read from here.

FastLoader (loader/base.py) picks a loader by its path's name; each loader registers its name
when its module is imported. This module imports them all, so a FastLoader taken from here
(or from `fastloader`) can build any of them, while the base and the loaders import nothing
above themselves.
"""

from __future__ import annotations

from fastloader.loader.audio import AudioLoader
from fastloader.loader.base import FastLoader
from fastloader.loader.dali import DaliLoader
from fastloader.loader.dropin import DropInLoader
from fastloader.loader.mix import MixLoader
from fastloader.loader.packed import PackedLoader
from fastloader.loader.video import VideoLoader

__all__ = ["AudioLoader", "DaliLoader", "DropInLoader", "FastLoader", "MixLoader", "PackedLoader",
           "VideoLoader"]
