"""LMDB backend: one LMDB file per shard, keyed by the sample's global index (big-endian u64)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import lmdb

from fastloader.errors import CorruptRecordError, DatasetError
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
        meminit=True,  # zero unused page bytes: same input, byte-identical shard (resume)
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


# One read-only environment per shard file per process, shared by every reader of it: py-lmdb
# refuses to open the same file twice in a process, and a forked child keeps using the
# environments it inherited (safe here: opened read-only with lock=False, so the child shares no
# lock table with its parent, only a read-only mapping), so its record views stay valid too.
# A child never closes an environment it inherited: closing one while the parent's threads had
# transactions on it can block forever inside LMDB (seen 2 in 30 forks with a pass in flight),
# and LMDB's rule is that a child leaves the parent's environments alone. Such an entry stays in
# the table, reused by the child's readers, until the child exits.


@dataclass
class _Open:
    """An environment of the table, its readers in this process, and whether it came with a
    fork (then never closed here)."""

    env: lmdb.Environment
    users: int = 0
    inherited: bool = False


_OPEN: dict[tuple[int, int], _Open] = {}  # (st_dev, st_ino) -> its entry
# Re-entrant: lmdb.open runs Python code under the lock, where garbage collection may free a
# loader whose dataset then releases its environments on this same thread; a plain Lock
# deadlocked there (seen in a full test run). The nested release touches another entry only:
# the one being opened is not in the table yet.
_OPEN_LOCK = threading.RLock()


# The table is held across fork(): no thread is then half-way through opening or closing an
# environment (one py-lmdb counts as open but the table does not list would make the child's
# next open of that file fail with "already open in this process").
def _lock_before_fork() -> None:
    _OPEN_LOCK.acquire()


def _unlock_in_parent() -> None:
    _OPEN_LOCK.release()


def _reinit_lock_in_child() -> None:
    global _OPEN_LOCK
    _OPEN_LOCK = threading.RLock()  # the forking thread's hold on the parent's is void here
    for entry in _OPEN.values():
        entry.inherited = True


os.register_at_fork(before=_lock_before_fork, after_in_parent=_unlock_in_parent,
                    after_in_child=_reinit_lock_in_child)


def _open_env(path: Path) -> lmdb.Environment:
    """A read-only environment on path; DatasetError naming it when LMDB refuses the file."""
    try:
        env = lmdb.open(
            str(path),
            subdir=False,
            readonly=True,
            lock=False,  # read-only files: no writer to coordinate with
            readahead=False,  # random access: readahead wastes page cache
            max_spare_txns=0,
        )
    except lmdb.Error as exc:  # garbage header, wrong version, too many open files...
        if "Too many open files" in str(exc):  # every shard stays open while the dataset is
            raise DatasetError(
                f"{path}: too many open files to open every shard of {path.parent}; raise "
                "the limit (`ulimit -n`) or pack with a larger --shard-size."
            ) from None
        raise DatasetError(
            f"{path} is not a readable LMDB shard ({type(exc).__name__}: {exc}); run "
            f"`packdata verify {path.parent}` and pack the dataset again."
        ) from None
    # Pages past the file's end would be mapped but not backed: touching one is SIGBUS.
    used = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    if used > path.stat().st_size:
        env.close()
        raise DatasetError(
            f"{path} says it uses {used} bytes of pages but holds {path.stat().st_size} "
            "(truncated); pack the dataset again."
        )
    return env


def _acquire_env(path: Path) -> tuple[tuple[int, int], lmdb.Environment]:
    stat = path.stat()
    key = (stat.st_dev, stat.st_ino)
    with _OPEN_LOCK:
        entry = _OPEN.get(key)
        if entry is None:
            entry = _OPEN[key] = _Open(_open_env(path))
        entry.users += 1
        return key, entry.env


def _release_env(key: tuple[int, int]) -> None:
    with _OPEN_LOCK:
        entry = _OPEN.get(key)
        if entry is None:
            return
        entry.users -= 1
        if entry.users <= 0 and not entry.inherited:
            del _OPEN[key]
            entry.env.close()


class Reader:
    """Zero-copy LMDB reads, safe in many threads (one read txn per thread) and after fork."""

    def __init__(self, root: Path, shards: Sequence[ShardInfo]) -> None:
        self._paths = [root / shard.file for shard in shards]
        self._lock = threading.Lock()
        self._envs: dict[int, lmdb.Environment] = {}
        self._keys: dict[int, tuple[int, int]] = {}
        self._pid = os.getpid()
        self._local = threading.local()
        try:
            for shard in range(len(self._paths)):
                self._env(shard)
        except BaseException:
            self.close()
            raise

    def _check_fork(self) -> None:
        if self._pid != os.getpid():  # forked: transactions are per process, start new ones
            self._pid = os.getpid()
            self._local = threading.local()
            self._lock = threading.Lock()  # a thread of the parent may have held it at fork

    def _env(self, shard: int) -> lmdb.Environment:
        env = self._envs.get(shard)
        if env is None:
            self._check_fork()
            with self._lock:
                env = self._envs.get(shard)
                if env is None:
                    self._keys[shard], env = _acquire_env(self._paths[shard])
                    self._envs[shard] = env
        return env

    def _txn(self, shard: int) -> lmdb.Transaction[memoryview]:
        self._check_fork()
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
        try:
            value = self._txn(shard).get(record_key(offset))
        except lmdb.Error as exc:  # a damaged page (LMDB checks page numbers and flags)
            raise CorruptRecordError(f"LMDB: {type(exc).__name__}: {exc}") from None
        return None if value is None else memoryview(value)

    def close(self) -> None:
        """Release the environments; views returned earlier must not be used afterwards."""
        self._check_fork()
        with self._lock:
            self._local = threading.local()
            for key in self._keys.values():
                _release_env(key)
            self._envs = {}
            self._keys = {}
