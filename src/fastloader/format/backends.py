"""Backend registry: suffixes, shard writers and readers for "lmdb" and "hdf5"."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Protocol

from fastloader.format.manifest import BACKENDS, ShardInfo

# Dataset folder suffix -> backend name.
SUFFIXES: dict[str, str] = {".lmdb": "lmdb", ".h5": "hdf5", ".hdf5": "hdf5"}


@dataclass
class ShardLayout:
    """Where a writer put each record: the index "offset" per record and the data offset."""

    offsets: list[int]
    data_offset: int | None


class ShardReader(Protocol):
    """What dataset.py needs from a backend reader."""

    def read(self, shard: int, offset: int, length: int) -> memoryview | None: ...

    def close(self) -> None: ...


def backend_module(name: str) -> ModuleType:
    """The module implementing backend `name` (write_shard, Reader, SHARD_SUFFIX)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS}")
    return importlib.import_module(f"fastloader.format.{name}")


def open_reader(name: str, root: Path, shards: Sequence[ShardInfo]) -> ShardReader:
    """A reader for the shards of a dataset stored with backend `name`."""
    reader: ShardReader = backend_module(name).Reader(root, shards)
    return reader


def backend_for_suffix(path: Path) -> str | None:
    """The backend named by path's suffix (.lmdb, .h5, .hdf5), or None."""
    return SUFFIXES.get(path.suffix.lower())
