"""The epoch order of large datasets: a seeded bijection evaluated at a rank's positions only,
with the sharding, padding and resume rules of the permutation (loader/order/epoch_order.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fastloader.loader.order.epoch_order import (
    BIJECTION,
    ORDER_LIMIT,
    PERMUTATION,
    Bijection,
    rank_share,
    shard,
)
from fastloader.loader.order.sampler import EpochSampler, epoch_indices

pytestmark = pytest.mark.native_neutral


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 4097, 65537])
def test_the_bijection_is_a_permutation_drawn_from_seed_and_epoch(n: int) -> None:
    order = Bijection(n, seed=3, epoch=1)(np.arange(n, dtype=np.int64))
    assert sorted(order.tolist()) == list(range(n))
    assert np.array_equal(order, Bijection(n, seed=3, epoch=1)(np.arange(n)))
    if n >= 64:
        assert not np.array_equal(order, Bijection(n, seed=3, epoch=2)(np.arange(n)))
        assert not np.array_equal(order, Bijection(n, seed=4, epoch=1)(np.arange(n)))
        assert not np.array_equal(order, np.arange(n))


@pytest.mark.parametrize(("n", "world", "start", "drop_last"),
                         [(1000, 3, 0, False), (1000, 8, 120, False), (1001, 4, 7, True),
                          (5, 8, 0, False), (40, 3, 39, False)])
def test_a_rank_share_is_the_strided_share_of_the_whole_order(
        n: int, world: int, start: int, drop_last: bool) -> None:
    whole = Bijection(n, seed=2, epoch=5)(np.arange(n, dtype=np.int64))
    shares = [rank_share(n, 5, 2, start, r, world, drop_last, BIJECTION) for r in range(world)]
    for r, share in enumerate(shares):
        assert np.array_equal(share, shard(whole[start:], r, world, drop_last))
    counts = Counter(i for share in shares for i in share.tolist())
    rest = set(whole[start:].tolist())
    if drop_last:
        assert max(counts.values()) == 1 and len(counts) == (n - start) // world * world
    else:
        assert set(counts) == rest and sum(counts.values()) - len(rest) < world


def test_below_the_limit_the_order_is_the_permutation_it_always_was() -> None:
    n = 997
    permutation = np.random.Generator(np.random.PCG64([6, 2])).permutation(n)
    assert np.array_equal(epoch_indices(n, 2, seed=6, rank=1, world_size=3),
                          shard(permutation, 1, 3, False))


def test_a_large_dataset_shuffles_by_the_bijection_and_a_run_keeps_its_kind() -> None:
    n = ORDER_LIMIT + 3
    sampler = EpochSampler(n, seed=1, rank=5, world_size=8)
    assert sampler.order_kind == BIJECTION
    positions = np.arange(5, -(-n // 8) * 8, 8) % n
    assert np.array_equal(sampler.indices(), Bijection(n, 1, 0)(positions))
    state = sampler.state(batches_done=0, batch_size=4, drop_last=False)
    assert state["order"] == BIJECTION
    old = {**state, "version": 1}  # a run begun before the bijection: it keeps the permutation
    sampler.load(old, batch_size=4, drop_last=False)
    assert sampler.order_kind == PERMUTATION
    assert sampler.state(0, 4, False)["order"] == PERMUTATION
    permutation = np.random.Generator(np.random.PCG64([1, 0])).permutation(n)
    assert np.array_equal(sampler.indices(), shard(permutation, 5, 8, False))
    bad = EpochSampler(n, seed=1)
    with pytest.raises(Exception, match=r"state\['order'\]"):
        bad.load({**state, "order": "other"}, batch_size=4, drop_last=False)


def test_an_elastic_resume_over_the_bijection_delivers_the_rest_once() -> None:
    n = ORDER_LIMIT + 11
    head = [EpochSampler(n, seed=7, rank=r, world_size=4) for r in range(4)]
    state = head[2].state(batches_done=500, batch_size=1000, drop_last=False)
    delivered = np.concatenate([s.indices()[:500 * 1000] for s in head])
    tail = []
    for r in range(3):
        sampler = EpochSampler(n, seed=7, rank=r, world_size=3)
        sampler.load(state, batch_size=512, drop_last=False)
        tail.append(sampler.indices())
    rest = np.concatenate(tail)
    seen = np.bincount(np.concatenate([delivered, rest]), minlength=n)
    assert seen.min() == 1 and seen.sum() - n == len(rest) - (n - len(delivered)) < 3
