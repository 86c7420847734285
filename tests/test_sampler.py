"""Tests of the epoch sampler: permutations, determinism, distributed padding and disjointness."""

from __future__ import annotations

import numpy as np
import pytest

from fastloader.errors import InvalidArgumentError, InvalidTypeError
from fastloader.loader.order.sampler import EpochSampler, epoch_indices

pytestmark = pytest.mark.native_neutral


def test_shuffled_epoch_is_a_permutation_that_changes_with_epoch() -> None:
    first = epoch_indices(100, epoch=0, seed=3)
    second = epoch_indices(100, epoch=1, seed=3)
    assert sorted(first.tolist()) == list(range(100))
    assert sorted(second.tolist()) == list(range(100))
    assert not np.array_equal(first, second)
    assert np.array_equal(first, epoch_indices(100, epoch=0, seed=3))
    assert not np.array_equal(first, epoch_indices(100, epoch=0, seed=4))


def test_no_shuffle_is_in_order() -> None:
    assert epoch_indices(5, epoch=7, shuffle=False).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("n,world", [(10, 3), (11, 4), (2, 3), (12, 4)])
def test_ranks_pad_to_equal_length_and_cover(n: int, world: int) -> None:
    parts = [epoch_indices(n, 2, 5, rank, world) for rank in range(world)]
    assert len({len(p) for p in parts}) == 1
    assert len(parts[0]) == -(-n // world)
    assert set(np.concatenate(parts).tolist()) == set(range(n))


@pytest.mark.parametrize("n,world", [(10, 3), (11, 4), (12, 4)])
def test_drop_last_ranks_are_disjoint_and_equal(n: int, world: int) -> None:
    parts = [epoch_indices(n, 0, 1, rank, world, drop_last=True) for rank in range(world)]
    merged = np.concatenate(parts)
    assert all(len(p) == n // world for p in parts)
    assert len(set(merged.tolist())) == len(merged) == (n // world) * world


def test_sampler_object_follows_set_epoch() -> None:
    sampler = EpochSampler(20, seed=1, rank=1, world_size=2)
    assert len(sampler) == 10
    before = list(sampler)
    sampler.set_epoch(4)
    assert list(sampler) == epoch_indices(20, 4, 1, 1, 2).tolist()
    assert list(sampler) != before
    assert sampler.num_batches(3) == 4
    assert sampler.num_batches(3, drop_last=True) == 3


def test_bad_arguments_are_named() -> None:
    with pytest.raises(InvalidArgumentError, match="rank"):
        EpochSampler(10, rank=2, world_size=2)
    with pytest.raises(InvalidArgumentError, match="seed"):
        epoch_indices(10, 0, seed=-1)
    with pytest.raises(InvalidTypeError, match="epoch"):
        EpochSampler(10).set_epoch(1.5)  # type: ignore[arg-type]


def test_checkpoint_state_round_trips_and_refuses_other_loaders() -> None:
    sampler = EpochSampler(20, seed=3, rank=0, world_size=2)
    sampler.set_epoch(5)
    state = sampler.state(batches_done=2, batch_size=4, drop_last=False)
    assert state["position"] == 16  # 2 batches of 4 on each of 2 ranks
    again = EpochSampler(20, seed=3, rank=1, world_size=2)
    assert again.load(state, batch_size=4, drop_last=False) == 2 and again.epoch == 5
    with pytest.raises(InvalidArgumentError, match="seed"):
        EpochSampler(20, seed=4, world_size=2).load(state, 4, False)
    with pytest.raises(InvalidArgumentError, match="batches_done"):
        again.load({**state, "batches_done": 4}, batch_size=4, drop_last=False)
    assert again.epoch == 5 and again.resume is not None  # a refused state changes nothing
    with pytest.raises(InvalidTypeError, match="state"):
        sampler.load([5, 2], batch_size=4, drop_last=False)
