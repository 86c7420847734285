"""HDF5 backend: one file per shard, records in one contiguous uint8 dataset read through mmap."""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fastloader.errors import DatasetError
from fastloader.format.backends import ShardLayout
from fastloader.format.manifest import ShardInfo

SHARD_SUFFIX = ".h5"
RECORDS = "records"  # contiguous, uncompressed uint8: every record back to back
OFFSETS = "offsets"  # (n + 1,) int64 record bounds, so a shard also reads on its own


def write_shard(path: Path, start: int, records: Sequence[bytes | memoryview]) -> ShardLayout:
    """Write records back to back into path's `records` dataset; return offsets and file offset."""
    import h5py  # only writers and verify need h5py; readers use the stored file offset

    lengths = np.fromiter((len(r) for r in records), np.int64, len(records))
    offsets = np.zeros(len(records) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(records), np.uint8)
    with h5py.File(path, "w") as handle:
        # No chunks, no filters: HDF5 stores the data contiguously at one file offset.
        dataset = handle.create_dataset(RECORDS, data=data, track_times=False)
        handle.create_dataset(OFFSETS, data=offsets, track_times=False)
        handle.attrs["first_sample"] = start
        data_offset = dataset.id.get_offset()
    if data_offset is None:
        raise OSError(f"{path}: HDF5 did not allocate the records dataset contiguously")
    return ShardLayout(offsets=offsets[:-1].tolist(), data_offset=int(data_offset))


def records_file_offset(path: Path) -> int | None:
    """Ask h5py where the contiguous `records` dataset starts (verify cross-checks this)."""
    import h5py

    with h5py.File(path, "r") as handle:
        offset = handle[RECORDS].id.get_offset()
    return None if offset is None else int(offset)


class Reader:
    """Zero-copy reads from a read-only mmap of each shard: no h5py, no HDF5 global lock.

    A shared read-only mapping stays valid in forked children, so no per-process reopen is needed.
    """

    def __init__(self, root: Path, shards: Sequence[ShardInfo]) -> None:
        self._paths = [root / shard.file for shard in shards]
        self._data_offsets = [shard.data_offset or 0 for shard in shards]
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._maps: dict[int, mmap.mmap] = {}
        self._views: dict[int, memoryview] = {}
        # Mapped now, not on first use: the dataset keeps the files it opened even if they are
        # unlinked (packdata --overwrite), and a damaged one fails at open with its name.
        try:
            for shard, info in enumerate(shards):
                if len(self._view(shard)) != info.bytes:
                    raise DatasetError(
                        f"{self._paths[shard]} changed size since the dataset was checked; "
                        "open the dataset again."
                    )
        except OSError as exc:
            self.close()
            raise DatasetError(f"cannot map shard {exc.filename} ({exc.strerror})") from None
        except BaseException:
            self.close()
            raise

    def _view(self, shard: int) -> memoryview:
        view = self._views.get(shard)
        if view is None:
            if self._pid != os.getpid():  # forked: a parent thread may have held the lock
                self._pid = os.getpid()
                self._lock = threading.Lock()
            with self._lock:
                view = self._views.get(shard)
                if view is None:
                    with open(self._paths[shard], "rb") as handle:
                        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                    self._maps[shard] = mapped
                    view = self._views[shard] = memoryview(mapped)
        return view

    def read(self, shard: int, offset: int, length: int) -> memoryview | None:
        """Bytes [offset, offset+length) of the shard's records, or None when they run short."""
        view = self._view(shard)
        begin = self._data_offsets[shard] + offset
        if begin < 0 or begin + length > len(view):
            return None
        return view[begin : begin + length]

    def close(self) -> None:
        """Drop the maps; ones still exported to callers close when their last view goes."""
        with self._lock:
            for view in self._views.values():
                with contextlib.suppress(BufferError):  # a buffer of the whole view is held
                    view.release()
            for mapped in self._maps.values():
                with contextlib.suppress(BufferError):  # a caller still holds a record view
                    mapped.close()
            self._views = {}
            self._maps = {}
