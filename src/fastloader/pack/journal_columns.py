"""Resuming a fields (v2) pack: each shard's column values are journaled beside its entry, and
a resumed pack reuses the longest prefix of shards whose file, entry and columns are whole."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastloader.format.columns import decode_column, encode_column
from fastloader.format.fields import FieldSpec
from fastloader.pack.journal import ShardRecord, Staging, sha256_file
from fastloader.pack.write import _ShardBuilder

_SUFFIX = ".columns.npz"


class ColumnShardBuilder(_ShardBuilder):
    """The shard builder that also journals the columns of each shard it writes."""

    def __init__(self, staging: Staging, backend: str, shard_size: int,
                 done: list[ShardRecord], specs: Sequence[FieldSpec],
                 columns: dict[str, list[Any]]) -> None:
        super().__init__(staging, backend, shard_size, done, False)
        self.specs = {s.name: s for s in specs}
        self.columns = columns

    def flush(self) -> None:
        """Journal the pending samples' column values (before the shard's entry), then write
        the shard: an entry always has its columns."""
        pending = len(self.data)
        if pending:
            arrays: dict[str, np.ndarray] = {}
            for name, values in self.columns.items():
                arrays |= encode_column(self.specs[name], values[len(values) - pending:])
            path = self.staging.journal / f"{len(self.records):05d}{_SUFFIX}"
            with open(path, "wb") as handle:
                np.savez(handle, **arrays)  # type: ignore[arg-type]
                handle.flush()
                os.fsync(handle.fileno())
        super().flush()


def reuse(staging: Staging, specs: Sequence[FieldSpec],
          columns: dict[str, list[Any]]) -> list[ShardRecord]:
    """The journal's longest prefix of whole shards; their column values go into columns."""
    reused: list[ShardRecord] = []
    by_name = {s.name: s for s in specs}
    while True:
        shard_id = len(reused)
        record = staging._load_record(shard_id)
        if record is None:
            break
        path = staging.dir / record.info.file
        if not path.is_file() or sha256_file(path) != (record.info.bytes, record.info.sha256):
            break
        try:
            with np.load(staging.journal / f"{shard_id:05d}{_SUFFIX}",
                         allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
            values = {name: decode_column(by_name[name], arrays) for name in columns}
        except (OSError, ValueError, KeyError):
            break
        if any(len(v) != record.info.count for v in values.values()):
            break
        for name, column in values.items():
            columns[name].extend(column)
        reused.append(record.compact())  # arrays, not per-sample lists, while packing on
    staging._drop_from(len(reused))
    return reused
