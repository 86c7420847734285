"""The sorted list of source files a pack reads, held in compact arrays (not one object a file).

A scan of N files keeps one concatenated blob of relative paths (their file-system bytes,
os.fsencode) with int64 offsets, int32 labels, int64 sizes and int64 mtimes: about 28 bytes
plus the path's length per file, where a Python object per file cost ~290 bytes (4 GB for
ImageNet-21k). The interface, for the packer and any engine that plans shards over it:

- ``len(listing)``: how many files; indices 0..len-1 are the sorted order (classes sorted,
  then folder, then name: torchvision ImageFolder's order, so sample k is file k);
- ``listing.relpath(i)``, ``listing.label(i)``, ``listing.size(i)``, ``listing.mtime_ns(i)``:
  one file's fields; ``listing[i]`` (or iteration, or ``listing.items(start, stop)``) gives
  them as a ``SourceFile`` built on demand, ``listing[a:b]`` a list of them;
- ``listing.labels``, ``listing.sizes``, ``listing.mtimes``: the columns as read-only numpy
  arrays (int32, int64, int64), ``listing.total_bytes`` their sum of sizes;
- ``listing.path_offsets`` / ``listing.path_bytes``: the path column in the index's own
  encoding (format/index.py: int64 offsets (N+1,), uint8 bytes), for slicing by range.

Paths are kept as bytes, so names that are not UTF-8 round-trip exactly (os.fsdecode gives
the surrogate-escaped str the scan saw).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

import numpy as np

_CHUNK = 4096  # files converted to Python values at a time when iterating

class SourceFile(NamedTuple):
    """One image file to pack: path relative to SRC (POSIX), label, and size/mtime for resume."""

    relpath: str
    label: int
    size: int
    mtime_ns: int


class ListingBuilder:
    """Appends files in their final order; finish() freezes them into a Listing."""

    def __init__(self) -> None:
        self._paths = bytearray()
        self._offsets = array("q", [0])  # path offsets (N+1,); growth amortized
        self._labels = array("i")
        self._sizes = array("q")
        self._mtimes = array("q")

    def append(self, relpath: str | bytes, label: int, size: int, mtime_ns: int) -> None:
        """Add the next file (relpath: POSIX, relative to SRC; str or file-system bytes)."""
        self._paths += relpath if isinstance(relpath, bytes) else os.fsencode(relpath)
        self._offsets.append(len(self._paths))
        self._labels.append(label)
        self._sizes.append(size)
        self._mtimes.append(mtime_ns)

    def __len__(self) -> int:
        return len(self._labels)

    def finish(self) -> Listing:
        """The Listing of what was appended; its arrays view the builder's buffers (no copy,
        so the peak stays one copy of the listing), and the builder starts over empty."""
        listing = Listing(
            _view(self._offsets, np.int64), _view(self._paths, np.uint8),
            _view(self._labels, np.int32), _view(self._sizes, np.int64),
            _view(self._mtimes, np.int64),
        )
        self.__init__()  # type: ignore[misc]
        return listing


def _view(buffer: array[int] | bytearray, dtype: type) -> np.ndarray:
    if not len(buffer):  # frombuffer refuses an empty buffer on some numpy versions
        return np.zeros(0, dtype)
    return np.frombuffer(buffer, dtype)


def _frozen(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False
    return values


class Listing(Sequence[SourceFile]):
    """The sorted source files of a pack (see the module docstring for the interface)."""

    def __init__(self, path_offsets: np.ndarray, path_bytes: np.ndarray, labels: np.ndarray,
                 sizes: np.ndarray, mtimes: np.ndarray) -> None:
        count = len(labels)
        if not (len(path_offsets) == count + 1 and len(sizes) == count == len(mtimes)):
            raise ValueError("listing columns disagree on the number of files")
        self.path_offsets = _frozen(path_offsets)
        self.path_bytes = _frozen(path_bytes)
        self.labels = _frozen(labels)
        self.sizes = _frozen(sizes)
        self.mtimes = _frozen(mtimes)
        self._blob = path_bytes.data  # a memoryview: slicing it copies nothing

    @classmethod
    def from_files(cls, files: Sequence[SourceFile]) -> Listing:
        """A Listing of SourceFiles (tests, small lists)."""
        builder = ListingBuilder()
        for source in files:
            builder.append(*source)
        return builder.finish()

    def __len__(self) -> int:
        return len(self.labels)

    def relpath(self, index: int) -> str:
        """File index's path relative to SRC, as the scan saw it (os.fsdecode of its bytes)."""
        start, stop = self.path_offsets[index : index + 2].tolist()
        return os.fsdecode(bytes(self._blob[start:stop]))

    def label(self, index: int) -> int:
        """File index's class id."""
        return int(self.labels[index])

    def size(self, index: int) -> int:
        """File index's size in bytes when it was scanned."""
        return int(self.sizes[index])

    def mtime_ns(self, index: int) -> int:
        """File index's modification time (ns) when it was scanned."""
        return int(self.mtimes[index])

    @property
    def total_bytes(self) -> int:
        """The sum of every file's size."""
        return int(self.sizes.sum())

    def items(self, start: int = 0, stop: int | None = None) -> Iterator[SourceFile]:
        """SourceFiles start..stop-1, built one at a time (read in chunks of the arrays)."""
        stop = len(self) if stop is None else min(stop, len(self))
        for first in range(max(start, 0), stop, _CHUNK):
            last = min(first + _CHUNK, stop)
            bounds = self.path_offsets[first : last + 1].tolist()
            columns = zip(self.labels[first:last].tolist(), self.sizes[first:last].tolist(),
                          self.mtimes[first:last].tolist(), strict=True)
            for k, (label, size, mtime) in enumerate(columns):
                path = os.fsdecode(bytes(self._blob[bounds[k] : bounds[k + 1]]))
                yield SourceFile(path, label, size, mtime)

    def _item(self, index: int) -> SourceFile:
        return SourceFile(self.relpath(index), int(self.labels[index]), int(self.sizes[index]),
                          int(self.mtimes[index]))

    @overload
    def __getitem__(self, index: int) -> SourceFile: ...

    @overload
    def __getitem__(self, index: slice) -> list[SourceFile]: ...

    def __getitem__(self, index: int | slice) -> SourceFile | list[SourceFile]:
        if isinstance(index, slice):
            return [self._item(k) for k in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(f"file {index} of a listing of {len(self)}")
        return self._item(index % len(self))

    def __iter__(self) -> Iterator[SourceFile]:
        return self.items()

    def __repr__(self) -> str:
        return f"Listing({len(self)} files, {self.total_bytes} bytes)"
