"""loader.stats(): counters that add up to the producer's wall time and count what was done."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fastloader.loader.loader import FastLoader
from fastloader.loader.pipeline.stats import Counters, Timer
from helpers import TRAIN


def test_timer_and_snapshot_sum_exactly() -> None:
    counters = Counters()
    with Timer(counters, "decode"):
        time.sleep(0.01)
    counters.add_batch(4)
    counters.add_time("active", 0.5)
    snapshot = counters.snapshot(queue_depth=1, prefetch=2, ring_slots=3, ring_bytes=10,
                                 pinned=False, num_threads=2, backend="pillow")
    assert snapshot.decode_s >= 0.01 and snapshot.images == 4
    assert snapshot.images_per_s == pytest.approx(8.0)
    assert snapshot.as_dict()["ring_bytes"] == 10


def test_loader_stats_add_up(dataset_path: Path) -> None:
    with FastLoader(dataset_path, batch_size=4, transforms=TRAIN, num_threads=2,
                    prefetch=2) as loader:
        for _ in range(2):
            for _batch in loader:
                time.sleep(0.002)  # a "training step"
        stats = loader.stats()
    assert stats.images == 48 and stats.batches == 12
    assert stats.ring_slots == 3 and stats.ring_bytes == 3 * 4 * 24 * 24 * 3
    stages = stats.read_s + stats.plan_s + stats.decode_s + stats.slot_wait_s
    # Decode and slot waits run on the producer thread; read and plan on its helper thread,
    # overlapping the previous batch's decode, so each side fits in the wall time. How much of
    # the wall they cover depends on the machine's load, so only the upper bounds are checked.
    assert stages > 0
    assert stats.decode_s + stats.slot_wait_s <= stats.producer_s
    assert stats.read_s + stats.plan_s <= stats.producer_s
    assert stats.decode_s > 0 and stats.wait_s >= 0 and stats.copy_s > 0
    assert stats.active_s >= 12 * 0.002 and stats.images_per_s > 0
