"""Prefetch follows the loader's order, and ranks on one node split the shards, over a real
HTTP server on 127.0.0.1."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from fastloader.format.open import open_dataset
from fastloader.loader.loader import FastLoader
from helpers import train_transforms

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's http://) is not installed")



def loader(url: str, cache: Path, **kw):
    return FastLoader(url, batch_size=4, transforms=train_transforms(), num_threads=1,
                      cache_dir=cache, shuffle=True, shuffle_window=2, **kw)


def test_shards_are_downloaded_in_the_order_the_epoch_reads_them(served) -> None:
    url, state, tmp = served
    ld = loader(url, tmp / "cache", prefetch_shards=1, seed=7)
    try:
        order = ld.sampler.indices()
        ld.sampler.set_epoch(0)
        first_use = list(dict.fromkeys(ld.dataset.shard_ids[order].tolist()))
        labels = [y for _, y in ld]
        files = [ld.dataset.manifest.shards[k].file for k in first_use]
    finally:
        ld.close()
    fetched = [name.split("/")[-1] for name in state["log"] if name.endswith(".mdb")]
    assert fetched == files  # each once, in the order of first use
    assert sum(len(y) for y in labels) == len(order)


def fetched_shards(state) -> list[str]:
    return [name.split("/")[-1] for name in list(state["log"]) if name.endswith(".mdb")]


def wait_for(condition, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_plan_epoch_prefetches_the_next_shards_of_the_order_before_any_read(served) -> None:
    url, state, tmp = served
    with open_dataset(url, cache_dir=tmp / "cache", window=1, prefetch=2) as ds:
        shards = len(ds.manifest.shards)
        assert shards >= 5
        sequence = np.random.default_rng(0).permutation(shards)
        order = np.concatenate([np.flatnonzero(ds.shard_ids == k) for k in sequence])
        files = [ds.manifest.shards[k].file for k in sequence]
        ds.plan_epoch(order)
        wait_for(lambda: len(fetched_shards(state)) >= 3)  # window 1 + prefetch 2
        time.sleep(0.3)
        # Those and no more. They download in parallel, so the server may see them in any order.
        assert sorted(fetched_shards(state)) == sorted(files[:3])
        first = order[ds.shard_ids[order] == sequence[0]]
        for i in first:  # the first shard read to its end: it is released, one more comes
            ds.record(int(i))
        wait_for(lambda: len(fetched_shards(state)) >= 4)
        assert sorted(fetched_shards(state)) == sorted(files[:4])


def test_ranks_on_one_node_read_their_own_shards_in_equal_batches(served) -> None:
    url, state, tmp = served
    loaders = [loader(url, tmp / "cache", rank=r, world_size=2) for r in range(2)]
    try:
        seen = [ld.sampler.indices() for ld in loaders]
        batches = [sum(1 for _ in ld) for ld in loaders]
        shards = [set(ld.dataset.shard_ids[s].tolist()) for ld, s in zip(loaders, seen,
                                                                        strict=True)]
    finally:
        for ld in loaders:
            ld.close()
    assert batches[0] == batches[1] == len(loaders[0])
    assert not shards[0] & shards[1]
    assert set(np.concatenate(seen).tolist()) == set(range(32))
    assert set(v for k, v in state["gets"].items() if k.endswith(".mdb")) == {1}
