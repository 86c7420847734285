"""A remote dataset's epoch plan counts only planned reads: a failed read still counts (its
shard is released, not left pinned), and an extra read (on_error="skip"'s replacement) does
not release a shard before its last planned record. Over a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fastloader.errors import CorruptRecordError
from fastloader.format.open import open_dataset

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's http://) is not installed")


def shard_order(ds) -> tuple[np.ndarray, list[int]]:
    """Every record, shard after shard, and the shard ids in that order."""
    shards = list(range(len(ds.manifest.shards)))
    order = np.concatenate([np.flatnonzero(ds.shard_ids == k) for k in shards])
    return order, shards


def test_an_extra_read_does_not_release_a_shard_before_its_last_planned_record(served) -> None:
    url, _, tmp = served
    with open_dataset(url, cache_dir=tmp / "cache", window=1, prefetch=0) as ds:
        order, shards = shard_order(ds)
        ds.plan_epoch(order)
        first = order[ds.shard_ids[order] == shards[0]]
        assert len(first) >= 3
        ds.record(int(first[0]))          # planned
        ds.record(int(first[0]))          # again: a replacement's read, not planned
        for i in first[1:-1]:
            ds.record(int(i))
        assert shards[0] in ds._open, "released before its last planned record was read"
        ds.record(int(first[-1]))
        assert shards[0] not in ds._open, "not released after its last planned record"


def test_a_failed_read_still_counts_so_its_shard_is_released(served) -> None:
    url, _, tmp = served
    with open_dataset(url, cache_dir=tmp / "cache", window=1, prefetch=0) as ds:
        order, shards = shard_order(ds)
        ds.plan_epoch(order)
        first = order[ds.shard_ids[order] == shards[0]]
        ds._length = ds._length.copy()  # the mapped index is read-only: edit a copy
        ds._length[first[0]] += 1  # the index disagrees with the record: CorruptRecordError
        with pytest.raises(CorruptRecordError):
            ds.record(int(first[0]))
        for i in first[1:]:
            ds.record(int(i))
        assert shards[0] not in ds._open, "a failed read left its shard open and pinned"
        assert ds._local(shards[0]) not in ds.cache._pins, "a failed read left it pinned"


def test_close_right_after_planning_returns_though_prefetches_were_still_queued(served) -> None:
    """window 1 + prefetch 1 plans two downloads for one pool thread: one waits in the queue,
    and close() cancels it. Nobody may then wait on its future forever."""
    url, _, tmp = served
    for attempt in range(5):
        ds = open_dataset(url, cache_dir=tmp / f"cache{attempt}", window=1, prefetch=1)
        order, _ = shard_order(ds)
        ds.plan_epoch(order)
        closer = threading.Thread(target=ds.close, daemon=True)
        closer.start()
        closer.join(30)
        assert not closer.is_alive(), "close() waits forever on a cancelled prefetch"
