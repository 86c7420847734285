"""The shard-aware shuffle: deterministic in (seed, epoch, rank), equal counts per rank, every
record once per epoch when the ranks' shards balance, and only W shards live at a time."""

from __future__ import annotations

import numpy as np
import pytest

from fastloader.errors import InvalidArgumentError
from fastloader.loader.order.shard_shuffle import assign_shards, shard_epoch_indices

COUNTS = np.array([10, 12, 9, 11, 10, 8, 13, 10, 10, 7], dtype=np.int64)
STARTS = np.concatenate([[0], np.cumsum(COUNTS)[:-1]])
SHARD_OF = np.repeat(np.arange(len(COUNTS)), COUNTS)


pytestmark = pytest.mark.native_neutral


def order(epoch=0, seed=0, rank=0, world=1, window=3, shuffle=True, drop_last=False):
    return shard_epoch_indices(STARTS, COUNTS, epoch, seed, rank, world, window, shuffle,
                               drop_last)


def test_one_rank_reads_every_record_once_in_windows_of_w_shards() -> None:
    got = order(window=3)
    assert sorted(got.tolist()) == list(range(int(COUNTS.sum())))
    # cut the order where a window's records end: each window spans at most 3 shards
    shards = SHARD_OF[got]
    live: set[int] = set()
    left = dict(enumerate(COUNTS.tolist()))
    for s in shards:
        live.add(int(s))
        assert len(live) <= 3
        left[int(s)] -= 1
        if left[int(s)] == 0:
            live.discard(int(s))


def test_deterministic_in_seed_epoch_rank_and_different_across_them() -> None:
    assert np.array_equal(order(epoch=2, seed=5), order(epoch=2, seed=5))
    assert not np.array_equal(order(epoch=1), order(epoch=2))
    assert not np.array_equal(order(seed=1), order(seed=2))
    assert np.array_equal(order(shuffle=False), np.arange(int(COUNTS.sum())))


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_get_equal_counts_from_their_own_shards(drop_last: bool) -> None:
    world = 3
    parts = [order(epoch=4, rank=r, world=world, drop_last=drop_last) for r in range(world)]
    assert len({len(p) for p in parts}) == 1
    owned = assign_shards(COUNTS, world, 0)
    for r, part in enumerate(parts):
        assert set(SHARD_OF[part].tolist()) <= set(owned[r].tolist())
    covered = set(np.concatenate(parts).tolist())
    if drop_last:
        assert len(covered) == len(parts[0]) * world  # nothing read twice
    else:
        assert covered == set(range(int(COUNTS.sum())))  # nothing left out
    # a rank keeps its shards from epoch to epoch (a node's cache keeps serving them)
    again = order(epoch=5, rank=1, world=world, drop_last=drop_last)
    assert set(SHARD_OF[again].tolist()) == set(SHARD_OF[parts[1]].tolist())


def test_more_ranks_than_shards_is_a_clear_error() -> None:
    with pytest.raises(InvalidArgumentError, match=r"world_size.*shards"):
        order(rank=0, world=11)
