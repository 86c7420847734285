"""RemoteDataset: a PackedDataset whose shards come from a URL through the shard cache.

Shards are opened lazily, each from its verified cached copy, and released when the epoch plan
says no more of its records come (or, without a plan, when it falls out of a small LRU set).
Records are copied out of the shard (a memcpy, small beside a JPEG decode) so a shard can be
closed and evicted while earlier records are still being decoded. `plan_epoch(order)` tells it
the epoch's order: a thread pool then downloads the next shards that order needs, `prefetch`
shards ahead of the ones being read.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

import numpy as np

from fastloader.errors import DatasetError, invalid_argument
from fastloader.format.backends import ShardReader, open_reader
from fastloader.format.cache import ShardCache, reserved_bytes
from fastloader.format.dataset import PackedDataset
from fastloader.format.manifest import Manifest
from fastloader.format.remote import Remote, cache_folder, fetch_verified, open_cache

DEFAULT_PREFETCH_SHARDS = 2  # shards read ahead of the reader (FastLoader's prefetch_shards)

# Every open RemoteDataset, weakly: reset in a forked child (see RemoteDataset.after_fork).
_LIVE: weakref.WeakSet[RemoteDataset] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for dataset in list(_LIVE):
        dataset.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class RemoteDataset(PackedDataset):
    """A packed dataset at an fsspec URL, read through a verified, bounded local cache.

    Args:
        url: the dataset folder's URL (s3://bucket/x.lmdb, gs://..., https://..., file://...).
        cache_dir: the local cache folder, shared by every process on the node.
        cache_limit: the most bytes the cache may hold (int or "200GB"); None: no limit.
        storage_options: fsspec options (credentials, endpoint_url, ...).
        prefetch: shards downloaded ahead of those being read.
        window: shards read at once (the shard-aware shuffle's window); sizes the check below.

    Raises:
        DatasetNotFoundError: no manifest.json at the URL.
        DatasetError: the download failed, or the manifest or index is damaged.
        InvalidArgumentError: cache_limit cannot hold window + prefetch shards.
    """

    def __init__(self, url: str, cache_dir: str | os.PathLike[str] | None = None,
                 cache_limit: int | str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 prefetch: int = DEFAULT_PREFETCH_SHARDS,
                 window: int = 1) -> None:
        self.url = url.rstrip("/")
        self._args = {"cache_dir": cache_dir, "cache_limit": cache_limit,
                      "storage_options": storage_options, "prefetch": prefetch, "window": window}
        self._remote = Remote(self.url, storage_options)
        self.cache: ShardCache = open_cache(cache_dir, cache_limit)
        raw = self._remote.read_bytes("manifest.json")
        self._folder = cache_folder(self.url, raw)
        self._manifest_sha = hashlib.sha256(raw).hexdigest()
        manifest = Manifest.from_json(raw.decode("utf-8", "replace"), self._remote.url_of(
            "manifest.json"))
        self.prefetch = max(0, int(prefetch))
        self._check_limit(manifest, raw, window)
        self._fetch_meta(manifest, raw)
        self._check_sha256 = True
        self.root = self.cache.root / self._folder
        self.manifest = manifest
        self.backend = manifest.backend
        self.classes = list(manifest.classes)
        self._load_index(raw)
        self._init_reader(window)

    def _init_reader(self, window: int) -> None:
        self._paths = None
        self.verify_records = False
        self._lock = threading.RLock()
        self._open: OrderedDict[int, ShardReader] = OrderedDict()
        self._keep = max(1, window) + self.prefetch
        self._pool: ThreadPoolExecutor | None = None
        self._futures: dict[int, Future[None]] = {}
        self._plan: _Plan | None = None
        self._reader = _CachedReader(self)
        _LIVE.add(self)

    def after_fork(self) -> None:
        """In a forked child: the download threads, and any lock they held, exist only in the
        parent. Start with a fresh lock, no pool and no downloads in flight (a shard the parent
        was fetching is fetched again on demand: the cache's file locks tell who does it); the
        epoch plan is the parent's, so reads follow no plan until the next plan_epoch. Shards
        already open stay open: their readers are fork-safe like a local dataset's."""
        self._lock = threading.RLock()
        self._pool = None
        self._futures = {}
        self._plan = None

    # -- construction ------------------------------------------------------------------

    def min_cache_limit(self, shards_at_once: int, meta_bytes: int = 0) -> int:
        """The smallest cache_limit that holds the index and the largest shards_at_once
        shards (those a reader pins at once: the window plus the prefetch)."""
        sizes = sorted((s.bytes for s in self.manifest.shards), reverse=True)
        return meta_bytes + sum(reserved_bytes(size) for size in sizes[:shards_at_once])

    def _check_limit(self, manifest: Manifest, raw: bytes, window: int) -> None:
        """cache_limit holds the index and the shards read at once; the cache keeps that
        least (a full disk's error names it: disk_space.cache_disk_full)."""
        limit = self.cache.limit
        self.manifest = manifest
        meta = reserved_bytes(len(raw)) + sum(
            reserved_bytes(int(np.prod(f.shape)) * np.dtype(f.dtype).itemsize + 4096)
            for f in manifest.fields.values())
        at_once = min(max(1, window) + self.prefetch, len(manifest.shards))
        need = self.min_cache_limit(at_once, meta)
        self.cache.least = need
        if limit is not None and limit < need:
            raise invalid_argument(
                "cache_limit", limit,
                f"cannot hold the index and the {at_once} largest shards that are read at once "
                f"(window {max(1, window)} + prefetch {self.prefetch}) of {self.url}",
                f"Pass cache_limit >= {need} bytes ({need / 2**20:.1f} MiB), or a smaller "
                "shuffle window or prefetch.")

    def _fetch_meta(self, manifest: Manifest, raw: bytes) -> None:
        digest = hashlib.sha256(raw).hexdigest()
        local = f"{self._folder}/manifest.json"

        def write(out: BinaryIO) -> None:
            out.write(raw)
        self.cache.fetch(local, len(raw), write)  # pinned while open: never evicted under us
        if hashlib.sha256((self.cache.root / local).read_bytes()).hexdigest() != digest:
            raise DatasetError(f"{self.cache.root / local}: the cached manifest differs from "
                               f"{self._remote.url_of('manifest.json')}'s; delete it.")
        for info in manifest.fields.values():
            local = f"{self._folder}/{info.file}"
            self.cache.pin(local)
            if self.cache.is_verified(local):  # warm: no request at all
                continue
            self.cache.unpin(local)
            size = self._remote.fs.size(f"{self._remote.path}/{info.file}")
            fetch_verified(self.cache, self._remote, f"{self._folder}/{info.file}", info.file,
                           int(size), info.sha256)

    # -- shards --------------------------------------------------------------------------

    def _local(self, shard: int) -> str:
        return f"{self._folder}/{self.manifest.shards[shard].file}"

    def _download(self, shard: int) -> None:
        info = self.manifest.shards[shard]
        try:
            fetch_verified(self.cache, self._remote, self._local(shard), info.file, info.bytes,
                           info.sha256)
        except DatasetError as exc:
            self._check_unchanged(exc)
            raise

    def _check_unchanged(self, cause: DatasetError) -> None:
        """After a failed download: if manifest.json changed remotely since open, say so (a
        rewritten dataset is never mixed with the version this reader opened)."""
        try:
            now = hashlib.sha256(self._remote.read_bytes("manifest.json")).hexdigest()
        except DatasetError:
            now = ""
        if now != self._manifest_sha:
            raise DatasetError(
                f"the dataset at {self.url} changed while this reader had it open "
                f"(manifest.json differs: {self._manifest_sha[:12]}... at open, "
                f"{now[:12] or 'gone'}... now); its records are never mixed: open it again "
                f"to read the new version. ({cause})") from cause

    def _ensure(self, shard: int) -> None:
        """Shard in the cache and pinned (once per shard while it is in use)."""
        with self._lock:
            future = self._futures.get(shard)
            if future is None:
                future = Future()
                future.set_running_or_notify_cancel()
                self._futures[shard] = future
                mine = True
            else:
                mine = False
        if mine:
            self._fetch_settling(shard, future)
        else:
            future.result()

    def _fetch_settling(self, shard: int, future: Future[None]) -> None:
        """Download shard and settle its future; a failure also forgets the future, so a
        later read tries again, and is raised."""
        try:
            self._download(shard)
            future.set_result(None)
        except BaseException as exc:
            with self._lock:
                self._futures.pop(shard, None)
            future.set_exception(exc)
            raise

    def _prefetch(self, shard: int) -> None:
        with self._lock:
            if shard in self._futures:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max(1, self.prefetch),
                                                thread_name_prefix="fastloader-fetch")
            future: Future[None] = Future()
            self._futures[shard] = future
        # The pool's own future swallows the re-raise: readers see the error through `future`.
        self._pool.submit(self._fetch_settling, shard, future)

    def shard_reader(self, shard: int) -> ShardReader:
        """An open reader of shard alone (downloaded first if needed)."""
        with self._lock:
            reader = self._open.get(shard)
            if reader is not None:
                self._open.move_to_end(shard)
                return reader
        self._ensure(shard)
        with self._lock:
            reader = self._open.get(shard)
            if reader is None:
                reader = open_reader(self.backend, self.root, [self.manifest.shards[shard]])
                self._open[shard] = reader
                if self._plan is None:
                    while len(self._open) > self._keep:
                        self.release(next(iter(self._open)))
        return reader

    def release(self, shard: int) -> None:
        """Close shard's reader and unpin it (it stays cached until evicted)."""
        with self._lock:
            reader = self._open.pop(shard, None)
            if reader is not None:
                reader.close()
            future = self._futures.pop(shard, None)
        if future is not None:
            try:
                future.result()
            except BaseException:  # a failed download holds no pin
                return
            self.cache.unpin(self._local(shard))

    # -- the epoch plan ----------------------------------------------------------------

    def plan_epoch(self, order: np.ndarray) -> None:
        """The records the next pass reads, in order: prefetch follows it, and each shard is
        released once its last record in it was read."""
        with self._lock:
            self._plan = None
            held = list(self._futures)
        for shard in held:  # outside the lock: a download in flight finishes first
            self.release(shard)
        with self._lock:
            self._plan = _Plan(np.asarray(order, dtype=np.int64), np.asarray(self._shard),
                               self._keep)
        self._advance()

    def _advance(self) -> None:
        plan = self._plan
        if plan is None:
            return
        for shard in plan.wanted(len(self._futures)):
            self._prefetch(shard)

    def record(self, i: int, verify: bool | None = None) -> memoryview:
        """As PackedDataset.record; the read also counts toward the pass's plan (a shard is
        released after its last planned record), even when it fails."""
        index = self._check_index(i)
        try:
            return super().record(index, verify)
        finally:
            self._after_read(index)

    def _after_read(self, index: int) -> None:
        with self._lock:
            plan = self._plan
            shard = int(self._shard[index])
            last = plan is not None and plan.read(index, shard)
        if last:
            self.release(shard)
            self._advance()

    def close(self) -> None:
        """Release every shard and pin; records read earlier stay valid (they are copies)."""
        with self._lock:
            self._plan = None
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._settle_cancelled()
        for shard in list(self._futures):
            self.release(shard)
        self.cache.unpin_all()
        self._reader = None

    def _settle_cancelled(self) -> None:
        """Fail the futures of prefetches the pool's shutdown dropped before they ran, so no
        one waits on them forever. (The pool ran or finished every other one; a future a
        reader settles itself is marked running.)"""
        with self._lock:
            dropped = [f for f in self._futures.values() if not f.done() and not f.running()]
        for future in dropped:
            future.set_exception(DatasetError(
                f"{self.url} was closed before this shard's download started; open it again."))

    def __getstate__(self) -> dict[str, object]:
        # A worker process reopens it from the URL and shares the node's cache.
        return {"url": self.url, "args": self._args, "verify_records": self.verify_records}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], **state["args"])  # type: ignore[misc]
        self.verify_records = bool(state.get("verify_records", False))

    def __repr__(self) -> str:
        return (f"RemoteDataset({self.url!r}, cache={str(self.cache.root)!r}, "
                f"records={len(self)}, shards={len(self.manifest.shards)})")


class _Plan:
    """Per record and per shard: planned reads left this pass; the shards in order of first use.

    Only a planned read counts: a read of a record the pass does not (or no longer) expect, such
    as on_error="skip"'s replacement of a bad record, neither releases its shard early nor
    leaves it pinned. (A replacement that is read before its own planned turn takes that turn's
    count; its shard is then reopened if that turn comes after the shard's release.)
    """

    def __init__(self, order: np.ndarray, shard_of: np.ndarray, keep: int) -> None:
        shards_in_order = shard_of[order]
        ids, first = np.unique(shards_in_order, return_index=True)
        counts = np.bincount(shards_in_order, minlength=int(ids.max()) + 1 if ids.size else 0)
        self.records = np.bincount(order, minlength=len(shard_of)).astype(np.int32)
        self.left = {int(k): int(counts[k]) for k in ids}
        self.sequence = [int(k) for k in ids[np.argsort(first)]]
        self.next = 0
        self.keep = keep

    def wanted(self, held: int) -> list[int]:
        """Shards to start fetching now, given `held` shards in use or in flight."""
        out: list[int] = []
        while held + len(out) < self.keep and self.next < len(self.sequence):
            out.append(self.sequence[self.next])
            self.next += 1
        return out

    def read(self, index: int, shard: int) -> bool:
        """Count one read of record index (in shard); True when it was the shard's last
        planned read this pass."""
        if self.records[index] <= 0:
            return False
        self.records[index] -= 1
        left = self.left[shard] - 1
        self.left[shard] = left
        return left == 0


class _CachedReader:
    """The ShardReader of a RemoteDataset: copies each record out of its cached shard."""

    def __init__(self, dataset: RemoteDataset) -> None:
        self._ds = dataset

    def read(self, shard: int, offset: int, length: int) -> memoryview | None:
        data = self._ds.shard_reader(shard).read(0, offset, length)
        return None if data is None else memoryview(bytes(data))

    def close(self) -> None:
        pass
