"""Cheap live counters of a FastLoader: throughput, time per stage, waits, memory held."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

# Producer stages; with `slot_wait` and `other` they add up to the producer's wall time.
STAGES = ("read", "plan", "decode", "slot_wait")


@dataclass(frozen=True)
class WorkerStats:
    """One remote worker's counters (FastLoader(..., remote=Remote(...)); loader/remote/).

    Attributes:
        worker: its number in this loader ("local" is the trainer's own decode).
        node: the Ray node it runs on ("" for the trainer, or before it started).
        state: "starting", "live" or "lost".
        batches: batches it delivered.
        decode_s: its busy seconds on those batches (read, plan, decode: on the worker).
        bytes: bytes of its batches over the wire (pixels, labels, geometry, masks).
        wait_s: seconds the trainer waited for its batches (it was the limit then).
        redone: its batches given to another worker after it was lost.
        taken_back: its batches the trainer decoded itself instead, because their turn came
            before the worker delivered them (cancelled there when it had not begun them).
    """

    worker: str
    node: str
    state: str
    batches: int
    decode_s: float
    bytes: int
    wait_s: float
    redone: int = 0
    taken_back: int = 0


@dataclass(frozen=True)
class LoaderStats:
    """A snapshot of a loader's counters (seconds are totals since the loader was made).

    Producer side: read_s (fetching records), plan_s (drawing crops/flips), decode_s (decode +
    crop + resize + flip into the ring slot, fused; on a CPU device also the NCHW layout and
    normalize, done per sample by the decode threads), slot_wait_s (waiting for a free ring slot:
    the producer is ahead). read_s and plan_s are spent on the producer's helper thread while
    the previous batch decodes; decode_s + slot_wait_s on the producer thread itself. Each side
    fits within producer_s (the producer's wall time); together they may exceed it a little.
    Consumer side: wait_s (the training loop waited for a batch: the loader was behind),
    copy_s (device step: H2D copy issue + NCHW layout + normalize on CUDA; on the CPU only
    handing over the batch the producer already laid out), active_s (time iterating).
    num_threads and prefetch are the current values (the autotuner's choice when "auto").

    Attributes:
        images: images delivered.
        batches: batches delivered.
        skipped: records replaced under on_error="skip".
        images_per_s: images / active_s.
        queue_depth: decoded batches waiting for the consumer now.
        ring_slots: slots of the ring (prefetch + 1).
        ring_bytes: bytes the ring holds.
        pinned: whether the ring is in pinned memory (CUDA).
        backend: the decode path in use ("native", "pillow" or "dali").
        autotune_state: "off", "measuring" or "settled".
        skipped_samples: where the first 32 skipped records live.
        remote_workers: with remote=, each remote worker's counters and the trainer's own
            decode's (worker "local"), as WorkerStats.
    """

    images: int
    batches: int
    skipped: int
    images_per_s: float
    read_s: float
    plan_s: float
    decode_s: float
    slot_wait_s: float
    producer_s: float
    copy_s: float
    wait_s: float
    active_s: float
    queue_depth: int
    prefetch: int
    ring_slots: int
    ring_bytes: int
    pinned: bool
    num_threads: int
    backend: str
    autotune_state: str = "off"  # "measuring" / "settled" with num_threads or prefetch="auto"
    skipped_samples: tuple[str, ...] = ()  # where the first 32 skipped records live
    remote_workers: tuple[WorkerStats, ...] = ()  # remote=: per worker, and "local"

    def as_dict(self) -> dict[str, Any]:
        """The snapshot as a plain dict (JSON-ready)."""
        return asdict(self)


class Counters:
    """Mutable totals shared by the producer thread and the consumer; a lock keeps sums exact."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = dict.fromkeys(
            (*STAGES, "producer", "copy", "wait", "active"), 0.0
        )
        self.images = 0
        self.batches = 0
        self.skipped = 0
        self.skipped_samples: list[str] = []  # the first few, for messages and the doctor

    def add_time(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] += seconds

    def add_batch(self, images: int) -> None:
        with self._lock:
            self.images += images
            self.batches += 1

    def add_skip(self, description: str) -> None:
        with self._lock:
            self.skipped += 1
            if len(self.skipped_samples) < 32:
                self.skipped_samples.append(description)

    def snapshot(self, **live: Any) -> LoaderStats:
        """Freeze the totals, adding the live values (queue depth, ring size, ...) given."""
        with self._lock:
            seconds = dict(self.seconds)
            images, batches, skipped = self.images, self.batches, self.skipped
            skipped_samples = tuple(self.skipped_samples)
        active = seconds["active"]
        return LoaderStats(
            images=images,
            batches=batches,
            skipped=skipped,
            images_per_s=images / active if active > 0 else 0.0,
            read_s=seconds["read"],
            plan_s=seconds["plan"],
            decode_s=seconds["decode"],
            slot_wait_s=seconds["slot_wait"],
            producer_s=seconds["producer"],
            copy_s=seconds["copy"],
            wait_s=seconds["wait"],
            active_s=active,
            skipped_samples=skipped_samples,
            **live,
        )


class Timer:
    """`with Timer(counters, "decode"):` adds the block's wall time to that counter."""

    __slots__ = ("_counters", "_name", "_start")

    def __init__(self, counters: Counters, name: str) -> None:
        self._counters = counters
        self._name = name
        self._start = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._counters.add_time(self._name, time.perf_counter() - self._start)


def batch_size_of(batch: Any) -> int:
    """Samples in a batch as torch's collate makes it: the length of its first tensor or array
    (a nested tensor's first size too), looking into tuples, lists and dicts; a list of strings
    or bytes (how default_collate batches them) counts its items; anything else is one."""
    if isinstance(batch, (tuple, list)) and batch:
        if isinstance(batch[0], (str, bytes)):
            return len(batch)
        return batch_size_of(batch[0])
    if isinstance(batch, Mapping) and batch:
        return batch_size_of(next(iter(batch.values())))
    if isinstance(batch, torch.Tensor) and batch.dim() > 0:
        return int(batch.size(0))  # .shape raises on a nested tensor; size(0) does not
    if isinstance(batch, np.ndarray) and batch.ndim > 0:
        return int(batch.shape[0])
    return 1
