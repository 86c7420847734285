"""The in-order shard builder of sample packs (pack/samples.py): records are added one by one
and a shard is written and journaled each time shard_size is reached."""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import numpy as np

from fastloader.format import index as index_mod
from fastloader.format.backends import backend_module
from fastloader.format.manifest import ShardInfo
from fastloader.pack import tiling
from fastloader.pack.engines import KILL_AFTER_SHARDS_ENV
from fastloader.pack.journal import SAMPLE_COLUMNS, ShardRecord, Staging, file_digest
from fastloader.pack.scan import SourceFile
from fastloader.pack.validate import Prepared

log = logging.getLogger(__name__)


class ShardBuilder:
    """Collects prepared records and writes a shard each time shard_size is reached."""

    def __init__(
        self, staging: Staging, backend: str, shard_size: int, done: list[ShardRecord], tiled: bool
    ):
        self.staging = staging
        self.tiles = tiling.TileColumns() if tiled else None
        self.module = backend_module(backend)
        self.shard_size = shard_size
        self.records: list[ShardRecord] = list(done)
        self.next_sample = sum(r.info.count for r in done)
        self.tail_skipped: list[list[str]] = []
        self._reset()
        self._written_this_run = 0
        self._kill_after = int(os.environ.get(KILL_AFTER_SHARDS_ENV, "0") or 0)

    def _reset(self) -> None:
        self.data: list[bytes] = []
        self.size = 0
        self.consumed: list[list[Any]] = []
        self.skipped: list[list[str]] = []
        self.samples: dict[str, list[Any]] = {name: [] for name in SAMPLE_COLUMNS}

    def add(self, source: SourceFile, prepared: Prepared) -> None:
        if prepared.data is None:
            self.consumed.append([source.relpath, source.size, source.mtime_ns])
            self.skipped.append([source.relpath, prepared.error or "unknown error"])
            log.warning("pack: skipped %s: %s", source.relpath, self.skipped[-1][1])
            return
        if self.data and self.size + len(prepared.data) > self.shard_size:
            self.flush()
        self.consumed.append([source.relpath, source.size, source.mtime_ns])
        self.data.append(prepared.data)
        self.size += len(prepared.data)
        row = (source.relpath, source.label, 0, len(prepared.data))
        row2 = (prepared.height, prepared.width, prepared.codec, prepared.crc32)
        for name, value in zip(SAMPLE_COLUMNS, row + row2, strict=True):
            self.samples[name].append(value)
        if self.tiles is not None:
            self.tiles.add(prepared)

    def flush(self) -> None:
        """Write the pending records as the next shard, fsync it, then journal it."""
        if not self.data:
            self.tail_skipped.extend(self.skipped)
            self.skipped = []
            return
        shard_id = len(self.records)
        name = f"shard-{shard_id:05d}{self.module.SHARD_SUFFIX}"
        layout = self.module.write_shard(self.staging.dir / name, self.next_sample, self.data)
        self.samples["offset"] = layout.offsets
        size, sha256 = file_digest(self.staging.dir / name)
        info = ShardInfo(name, self.next_sample, len(self.data), size, sha256, layout.data_offset)
        columns = self.tiles.take() if self.tiles is not None else None
        record = ShardRecord(info, self.consumed, self.skipped, self.samples, columns)
        self.staging.commit_shard(record, shard_id)
        self.records.append(record)
        self.next_sample += len(self.data)
        self._reset()
        self._written_this_run += 1
        if self._kill_after and self._written_this_run >= self._kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    @property
    def all_skipped(self) -> list[list[str]]:
        return [s for r in self.records for s in r.skipped] + self.tail_skipped + self.skipped


def build_index(records: list[ShardRecord], tiled: bool) -> dict[str, np.ndarray]:
    def column(name: str) -> list[Any]:
        return [v for r in records for v in r.samples[name]]

    shard = [k for k, r in enumerate(records) for _ in range(r.info.count)]
    path_offsets, path_bytes = index_mod.encode_paths(column("relpath"))
    extra = tiling.index_fields([r.tiles for r in records if r.tiles is not None]) if tiled else {}
    return extra | {
        "shard": np.asarray(shard, np.int32),
        "offset": np.asarray(column("offset"), np.int64),
        "length": np.asarray(column("length"), np.int64),
        "label": np.asarray(column("label"), np.int64),
        "shape": np.stack(
            [np.asarray(column("height"), np.int32), np.asarray(column("width"), np.int32)], 1
        ).reshape(-1, 2),
        "codec": np.asarray(column("codec"), np.uint8),
        "crc32": np.asarray(column("crc32"), np.uint32),
        "path_offsets": path_offsets,
        "path_bytes": path_bytes,
    }
