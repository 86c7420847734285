"""LMDB backend: one LMDB file per shard, keyed by the sample's global index (big-endian u64)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lmdb

from fastloader.format.backends import ShardLayout
from fastloader.format.manifest import ShardInfo

SHARD_SUFFIX = ".mdb"
_PAGE = 4096


def record_key(index: int) -> bytes:
    """The LMDB key of sample `index`: 8 bytes big-endian, so append order is key order."""
    return index.to_bytes(8, "big")


def write_shard(path: Path, start: int, records: Sequence[bytes | memoryview]) -> ShardLayout:
    """Write records as keys start, start+1, ... into a new LMDB file at path."""
    payload = sum(len(r) for r in records)
    # Values above half a page go to overflow pages: budget a page of rounding per record plus
    # B-tree pages. LMDB only grows the file to the pages it uses, so a generous map is free.
    map_size = 2 * payload + len(records) * 2 * _PAGE + (1 << 20)
    env = lmdb.open(
        str(path),
        subdir=False,
        map_size=map_size,
        lock=False,  # the only writer, in a private temp folder
        sync=False,
        metasync=False,
        meminit=False,
        max_dbs=0,
    )
    try:
        with env.begin(write=True) as txn:
            cursor = txn.cursor()
            items = ((record_key(start + k), bytes(r)) for k, r in enumerate(records))
            cursor.putmulti(items, append=True)
        env.sync(True)
    finally:
        env.close()
    return ShardLayout(offsets=[start + k for k in range(len(records))], data_offset=None)


class Reader:
    """Zero-copy LMDB reads, safe in many threads (one read txn per thread) and after fork."""

    def __init__(self, root: Path, shards: Sequence[ShardInfo]) -> None:
        self._paths = [root / shard.file for shard in shards]
        self._lock = threading.Lock()
        self._retired: list[Any] = []  # environments from a parent process, kept mapped
        self._reset()

    def _reset(self) -> None:
        """Start fresh handles for this process (LMDB forbids using a parent's env)."""
        self._pid = os.getpid()
        self._envs: dict[int, Any] = {}
        self._local = threading.local()

    def _env(self, shard: int) -> Any:
        env = self._envs.get(shard)
        if env is None:
            with self._lock:
                env = self._envs.get(shard)
                if env is None:
                    env = lmdb.open(
                        str(self._paths[shard]),
                        subdir=False,
                        readonly=True,
                        lock=False,  # read-only files: no writer to coordinate with
                        readahead=False,  # random access: readahead wastes page cache
                        max_spare_txns=0,
                    )
                    self._envs[shard] = env
        return env

    def _txn(self, shard: int) -> Any:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    # Views handed out before fork point into these maps: keep them mapped.
                    self._retired.extend(self._envs.values())
                    self._reset()
        txns = getattr(self._local, "txns", None)
        if txns is None:
            txns = self._local.txns = {}
        txn = txns.get(shard)
        if txn is None:
            # A read txn that lives as long as the thread: returned buffers stay valid.
            txn = txns[shard] = self._env(shard).begin(buffers=True)
        return txn

    def read(self, shard: int, offset: int, length: int) -> memoryview | None:
        """The record stored under key `offset` in `shard`, or None when the key is missing."""
        value = self._txn(shard).get(record_key(offset))
        return None if value is None else memoryview(value)

    def close(self) -> None:
        """Close every environment; views returned earlier must not be used afterwards."""
        with self._lock:
            for env in self._envs.values():
                env.close()
            self._envs = {}
            self._local = threading.local()
