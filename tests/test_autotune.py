"""Autotune: the hill-climb settles within a bounded number of batches and stays in bounds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from fastloader.autotune import (
    MEASURE_BATCHES,
    WARMUP_BATCHES,
    AutoTuner,
    make_tuner,
    max_prefetch_for,
    thread_ladder,
)
from fastloader.errors import InvalidArgumentError, InvalidTypeError
from fastloader.loader import FastLoader
from fastloader.sampler import threads_per_rank
from test_loader import TRAIN, packed_tree

# Epochs of 12 batches: one more than AutoTuner.max_batches_to_settle(cores, 5) needs.
EPOCHS = AutoTuner.max_batches_to_settle(threads_per_rank(1), 5) // 12 + 2


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packed_tree(tmp_path_factory.mktemp("autotune"), classes=3, per_class=12)


def drive(tuner: AutoTuner, per_image_s: dict[int, float], batches: int,
          step_s: float = 0.0, sizes: tuple[int, ...] = (8,), slot_wait_s: float = 0.0,
          wait_s: float = 0.0) -> list[tuple[int, int]]:
    """Feed a tuner a synthetic machine where `threads` decode at per_image_s[threads]."""
    seen = []
    for b in range(batches):
        images = sizes[b % len(sizes)]
        setting = tuner.setting()
        seen.append((setting.threads, setting.prefetch))
        tuner.record_produce(per_image_s[setting.threads] * images, slot_wait_s, images)
        tuner.record_consume(wait_s, step_s)
    return seen


def test_ladder_and_budget() -> None:
    assert thread_ladder(1) == [1]
    assert thread_ladder(2) == [1, 2]
    assert thread_ladder(6) == [1, 2, 4, 6]
    assert thread_ladder(8) == [1, 2, 4, 8]
    assert max_prefetch_for(10_000, 1_000) == 9
    assert max_prefetch_for(10**12, 1) == 16  # capped
    assert max_prefetch_for(1_500, 1_000) == 0


def test_climbs_while_faster_and_keeps_the_fewest_threads_near_the_best() -> None:
    # 1 -> 2 -> 4 each much faster, 8 only 2% faster than 4: settle at 4, not 8.
    speeds = {1: 8e-3, 2: 4.2e-3, 4: 2.3e-3, 8: 2.25e-3}
    tuner = AutoTuner(None, 8, 2, 16)
    bound = AutoTuner.max_batches_to_settle(8, 16)
    seen = drive(tuner, speeds, bound)
    assert tuner.state == "settled" and tuner.threads == 4
    # One block at 1, then three blocks per comparison (2 v 1, 4 v 2, 8 v 4).
    assert tuner.settled_after == (1 + 3 * 3) * (WARMUP_BATCHES + MEASURE_BATCHES) <= bound
    assert max(t for t, _ in seen) <= 8 and set(tuner.measured) == {1, 2, 4, 8}
    assert [t for t, _ in seen[:16]] == [1] * 4 + [2] * 4 + [1] * 4 + [2] * 4  # interleaved
    assert seen[-1] == (4, 2)  # the prefetch was fixed: it never changed


def test_stops_climbing_when_more_threads_do_not_help() -> None:
    tuner = AutoTuner(None, 16, 2, 16)
    drive(tuner, {1: 5e-3, 2: 5.1e-3, 4: 1e-3, 8: 1e-3, 16: 1e-3}, 30)
    assert tuner.state == "settled" and tuner.threads == 1 and set(tuner.measured) == {1, 2}


def test_stops_when_the_loader_already_keeps_up_with_the_step() -> None:
    # 8 images at 1 ms each = 8 ms per batch against a 50 ms step: 1 thread is enough.
    tuner = AutoTuner(None, 8, 2, 16)
    drive(tuner, {1: 1e-3, 2: 0.5e-3, 4: 0.25e-3, 8: 0.2e-3}, 10, step_s=0.05)
    assert tuner.state == "settled" and tuner.threads == 1
    # 8 ms per batch of 8 against a 10 ms step: not enough headroom, so it climbs; a short
    # last batch of an epoch (1 image) must not make the loader look fast.
    short_last = AutoTuner(None, 2, 2, 16)
    drive(short_last, {1: 1e-3, 2: 0.5e-3}, 20, step_s=0.01, sizes=(8, 8, 8, 1))
    assert short_last.threads == 2 and set(short_last.measured) == {1, 2}


def test_prefetch_doubles_on_bursty_waits_within_its_cap_then_settles() -> None:
    tuner = AutoTuner(2, 2, None, 5)
    bound = AutoTuner.max_batches_to_settle(2, 5)
    seen = drive(tuner, {2: 1e-3}, bound, step_s=0.01, slot_wait_s=0.004, wait_s=0.004)
    assert tuner.state == "settled"
    assert tuner.prefetch == 4 and max(p for _, p in seen) <= 5  # 2 -> 4; 8 is over the cap
    steady = AutoTuner(2, 2, None, 16)
    drive(steady, {2: 1e-3}, 40, step_s=0.01)  # the consumer never waited: keep 2
    assert steady.state == "settled" and steady.prefetch == 2


def test_make_tuner_checks_arguments() -> None:
    assert make_tuner(3, 4, None, 2, 100).state == "off"
    with pytest.raises(InvalidArgumentError, match="memory_budget"):
        make_tuner("auto", "auto", 150, 2, 100)
    with pytest.raises(InvalidTypeError, match="prefetch"):
        make_tuner("auto", "deep", None, 2, 100)
    with pytest.raises(InvalidArgumentError, match="num_threads"):
        make_tuner(0, 2, None, 2, 100)


def test_loader_auto_settles_bounded_and_batches_match_fixed(dataset_path: Path) -> None:
    cores = threads_per_rank(1)
    with FastLoader(dataset_path, batch_size=3, shuffle=True, transforms=TRAIN,
                    prefetch="auto", memory_budget=6 * 3 * 24 * 24 * 3, device="cpu") as auto:
        assert auto.stats().autotune_state == "measuring" and auto.stats().num_threads == 1
        batches, states = [], []
        for _epoch in range(EPOCHS):
            for images, labels in auto:
                batches.append((images.clone(), labels.clone()))
                time.sleep(0.001)
                stats = auto.stats()
                states.append(stats.autotune_state)
                assert 1 <= stats.num_threads <= cores and stats.prefetch <= 5
                assert stats.ring_bytes <= 6 * 3 * 24 * 24 * 3  # never above the budget
        bound = AutoTuner.max_batches_to_settle(cores, 5)
        assert bound < len(states)
        assert states[-1] == "settled" and "measuring" not in states[bound:]
        settled = (auto.stats().num_threads, auto.stats().ring_slots)
        assert "settled" in repr(auto)
        for _ in auto:  # another epoch: the choice is kept, the ring does not grow
            pass
        assert (auto.stats().num_threads, auto.stats().ring_slots) == settled
    with FastLoader(dataset_path, batch_size=3, shuffle=True, transforms=TRAIN,
                    num_threads=2, device="cpu") as fixed:
        assert fixed.stats().autotune_state == "off"
        expected = [(i, lb) for _ in range(EPOCHS) for i, lb in fixed]
    assert len(batches) == len(expected) == 12 * EPOCHS
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
               for a, b in zip(batches, expected, strict=True))
