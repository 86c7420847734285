"""Autotune: the step-down search starts at the top, settles within a bounded number of
batches, stays in bounds, and decides from interleaved measurements (a pure state machine
fed synthetic times here, then a real loader)."""

from __future__ import annotations

import time
from pathlib import Path
from random import Random

import pytest
import torch

from fastloader.errors import InvalidArgumentError, InvalidTypeError
from fastloader.loader.loader import FastLoader
from fastloader.loader.order.sampler import threads_per_rank
from fastloader.loader.pipeline.autotune import (
    EXPLORE_AFTER,
    MEASURE_BATCHES,
    PROBE_BATCHES,
    WARMUP_BATCHES,
    AutoTuner,
    make_tuner,
    max_prefetch_for,
    thread_ladder,
)
from helpers import TRAIN, packed_tree

# Epochs of 12 batches: one more than AutoTuner.max_batches_to_settle(cores, 5) needs.
EPOCHS = AutoTuner.max_batches_to_settle(threads_per_rank(1), 5) // 12 + 2


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packed_tree(tmp_path_factory.mktemp("autotune"), classes=3, per_class=12)


BLOCK = WARMUP_BATCHES + MEASURE_BATCHES
PROBE = WARMUP_BATCHES + PROBE_BATCHES  # a lower rung that loses clearly costs only this


def drive(tuner: AutoTuner, per_image_s: dict[int, float], batches: int,
          step_s: float = 0.0, sizes: tuple[int, ...] = (8,), slot_wait_s: float = 0.0,
          wait_s: float = 0.0, load: tuple[float, ...] = ()) -> list[tuple[int, int]]:
    """Feed a tuner a synthetic machine where `threads` decode at per_image_s[threads];
    load[b] (default 1) slows batch b down, like another process taking the cores."""
    seen = []
    for b in range(batches):
        images = sizes[b % len(sizes)]
        setting = tuner.setting()
        seen.append((setting.threads, setting.prefetch))
        slowdown = load[b] if b < len(load) else 1.0
        tuner.record_produce(per_image_s[setting.threads] * images * slowdown, slot_wait_s,
                             images)
        tuner.record_consume(wait_s, step_s)
    return seen


def threads_of(seen: list[tuple[int, int]]) -> list[int]:
    return [threads for threads, _ in seen]


def test_ladder_and_budget() -> None:
    assert thread_ladder(1) == [1]
    assert thread_ladder(2) == [1, 2]
    assert thread_ladder(6) == [1, 2, 4, 6]
    assert thread_ladder(8) == [1, 2, 4, 8]
    assert max_prefetch_for(10_000, 1_000) == 9
    assert max_prefetch_for(10**12, 1) == 16  # capped
    assert max_prefetch_for(1_500, 1_000) == 0


def test_a_short_run_runs_at_all_cores_from_its_first_batch() -> None:
    tuner = AutoTuner(None, 8, 2, 16)
    assert tuner.setting().threads == 8 and tuner.state == "measuring"
    seen = drive(tuner, {1: 8e-3, 2: 4e-3, 4: 2e-3, 8: 1e-3}, EXPLORE_AFTER)
    assert threads_of(seen) == [8] * EXPLORE_AFTER and tuner.state == "measuring"
    # Then the first probe starts, and stats() shows it.
    assert tuner.summary()["num_threads"] == 4 and tuner.summary()["autotune_state"] == (
        "measuring")
    # One usable core: nothing to choose, settled before the first batch.
    single = AutoTuner(None, 1, 2, 16)
    assert single.state == "settled" and single.threads == 1 and single.settled_after == 0


def test_cpu_bound_decode_keeps_all_cores_after_one_short_probe() -> None:
    # Decode scales with threads: 4 threads are clearly slower than 8, so the probe of 4
    # ends after its warm-up and PROBE_BATCHES measured batches.
    tuner = AutoTuner(None, 8, 2, 16)
    bound = AutoTuner.max_batches_to_settle(8, 16)
    seen = drive(tuner, {1: 8e-3, 2: 4.2e-3, 4: 2.3e-3, 8: 1.2e-3}, bound)
    assert tuner.state == "settled" and tuner.threads == 8
    assert tuner.settled_after == EXPLORE_AFTER + PROBE <= bound
    after = bound - EXPLORE_AFTER - PROBE
    assert threads_of(seen) == [8] * EXPLORE_AFTER + [4] * PROBE + [8] * after
    assert set(tuner.measured) == {4, 8} and seen[-1] == (8, 2)  # prefetch fixed: unchanged


def test_a_close_rival_gets_the_whole_interleaved_comparison_and_loses_by_more_than_gain(
) -> None:
    # 4 threads are 10% slower than 8: not clear after the probe, so the comparison runs
    # lower, current, lower; 10% is more than GAIN, so the top stays.
    tuner = AutoTuner(None, 8, 2, 16)
    seen = drive(tuner, {1: 8e-3, 2: 4e-3, 4: 2.2e-3, 8: 2e-3}, 50)
    assert threads_of(seen)[:EXPLORE_AFTER + 3 * BLOCK + 1] == (
        [8] * EXPLORE_AFTER + [4] * BLOCK + [8] * BLOCK + [4] * BLOCK + [8])
    assert tuner.state == "settled" and tuner.threads == 8
    assert tuner.settled_after == EXPLORE_AFTER + 3 * BLOCK


def test_steps_down_while_a_lower_rung_is_as_fast() -> None:
    # Beyond 2 threads nothing scales (I/O or memory bound): 8 -> 4 (equal) -> 2 (2.5%
    # slower: within GAIN) -> 1 is clearly slower: settle at 2, leaving 6 cores free.
    tuner = AutoTuner(None, 8, 2, 16)
    bound = AutoTuner.max_batches_to_settle(8, 16)
    drive(tuner, {1: 5e-3, 2: 2.05e-3, 4: 2e-3, 8: 2e-3}, bound)
    assert tuner.state == "settled" and tuner.threads == 2
    assert set(tuner.measured) == {1, 2, 4, 8}
    assert tuner.settled_after == EXPLORE_AFTER + 2 * 3 * BLOCK + PROBE <= bound
    # All rungs equal: it walks down to one thread, within the bound.
    flat = AutoTuner(None, 16, 2, 16)
    flat_bound = AutoTuner.max_batches_to_settle(16, 16)
    drive(flat, dict.fromkeys(thread_ladder(16), 3e-3), flat_bound)
    assert flat.state == "settled" and flat.threads == 1
    assert flat.settled_after is not None and flat.settled_after <= flat_bound


def test_a_load_spike_on_the_baseline_does_not_push_the_search_down() -> None:
    # Another process takes the cores during the top's last baseline block: 8 threads look
    # twice as slow, so 4 (truly 50% slower) survives the probe. The decision weighs the
    # middle block of 8 against 4's blocks on either side, so the spike does not count.
    spike = (1.0,) * (EXPLORE_AFTER - MEASURE_BATCHES) + (2.0,) * MEASURE_BATCHES
    tuner = AutoTuner(None, 8, 2, 16)
    seen = drive(tuner, {1: 8e-3, 2: 4e-3, 4: 3e-3, 8: 2e-3}, 50, load=spike)
    comparison = threads_of(seen)[EXPLORE_AFTER:EXPLORE_AFTER + 3 * BLOCK]
    assert comparison == [4] * BLOCK + [8] * BLOCK + [4] * BLOCK
    assert tuner.state == "settled" and tuner.threads == 8


def test_steps_down_when_fewer_threads_still_keep_up_with_the_step() -> None:
    # 8 images at 0.2 ms each = 1.6 ms per batch against a 50 ms step: the loader keeps up,
    # so the probe starts right after the baseline block (no EXPLORE_AFTER wait) and every
    # rung that still keeps up wins, even the 5x slower single thread: cores go to training.
    tuner = AutoTuner(None, 8, 2, 16)
    seen = drive(tuner, {1: 1e-3, 2: 0.5e-3, 4: 0.25e-3, 8: 0.2e-3}, 60, step_s=0.05)
    assert tuner.state == "settled" and tuner.threads == 1
    assert threads_of(seen)[BLOCK] == 4 and tuner.settled_after == BLOCK + 3 * 3 * BLOCK
    # 8 ms per batch of 8 at 1 thread against a 10 ms step is over ENOUGH: 2 threads stay.
    # A short last batch of an epoch (1 image) must not make the loader look fast.
    short_last = AutoTuner(None, 2, 2, 16)
    drive(short_last, {1: 1e-3, 2: 0.5e-3}, 40, step_s=0.01, sizes=(8, 8, 8, 1))
    assert short_last.state == "settled" and short_last.threads == 2
    assert set(short_last.measured) == {1, 2}


@pytest.mark.parametrize("max_threads", [1, 2, 3, 6, 8, 16])
def test_any_machine_settles_within_the_bound_on_a_rung_of_the_ladder(max_threads: int) -> None:
    rng = Random(max_threads)
    bound = AutoTuner.max_batches_to_settle(max_threads, 16)
    ladder = thread_ladder(max_threads)
    for _machine in range(40):
        speeds = {t: rng.uniform(0.5e-3, 5e-3) for t in ladder}
        noise = tuple(rng.uniform(0.8, 1.25) for _ in range(bound))
        tuner = AutoTuner(None, max_threads, None, 16)
        seen = drive(tuner, speeds, bound, step_s=rng.choice([0.0, 0.01, 0.1]), load=noise)
        assert tuner.state == "settled" and tuner.threads in ladder
        assert all(1 <= t <= max_threads and p <= 16 for t, p in seen)
        assert tuner.settled_after is not None and tuner.settled_after <= bound


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
        # A fresh loader decodes with every core it may use from its first batch.
        assert auto.stats().autotune_state == "measuring" and auto.stats().num_threads == cores
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
        # The decoder runs the tuner's choice, even when it settled on a pass's last batch.
        assert auto.stats().num_threads == auto.num_threads
    with FastLoader(dataset_path, batch_size=3, shuffle=True, transforms=TRAIN,
                    num_threads=2, device="cpu") as fixed:
        assert fixed.stats().autotune_state == "off"
        expected = [(i, lb) for _ in range(EPOCHS) for i, lb in fixed]
    assert len(batches) == len(expected) == 12 * EPOCHS
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
               for a, b in zip(batches, expected, strict=True))
