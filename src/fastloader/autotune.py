"""Online tuning of a loader's decode threads and prefetch depth during its first batches.

Threads: a hill-climb over 1, 2, 4, ... up to the cores this process may use. The best so
far and the next rung are compared in interleaved blocks (best, next, best, next), each block
one warm-up batch then MEASURE_BATCHES measured ones; the measure is the producer's time per
image (read + plan + decode: its own work, under whatever load the consumer adds), compared
by median. The next rung wins only when GAIN faster. The climb stops when the next rung
loses, at the core count, or as soon as the producer needs less than ENOUGH of the training
step's time (more threads would only take cores from the training loop).

Prefetch: after threads settle, windows of PREFETCH_WINDOW consumed batches are watched. When
the consumer waited for batches while the producer also sat blocked on a full ring (its output
is bursty relative to the step), prefetch doubles, within the memory budget; otherwise it
settles. The ring grows only during this settle phase, never afterwards, so memory stays
bounded: at most max_prefetch + 1 slots, max_prefetch chosen at start from the budget.

The tuner never touches pixels: every setting yields identical batches (the decode is
thread-count-free and prefetch only changes how far ahead the producer runs).
"""

from __future__ import annotations

import numbers
import statistics
import threading
from dataclasses import dataclass
from typing import Any

from fastloader.errors import invalid_argument, invalid_type

AUTO = "auto"
WARMUP_BATCHES = 1  # after a change of setting (thread pool restart, caches), not measured
MEASURE_BATCHES = 3  # batches measured per thread setting; the median is kept
GAIN = 1.05  # more threads must be at least 5% faster per image to be worth their cores
ENOUGH = 0.7  # the producer needs < 70% of the step time: the loader keeps up, stop climbing
PREFETCH_WINDOW = 6  # consumed batches per prefetch decision
BURSTY = 0.05  # share of time both sides waited on each other that calls for more prefetch
MAX_AUTO_PREFETCH = 16
DEFAULT_MEMORY_BUDGET = 512 * 1024 * 1024  # bytes of ring the auto prefetch may hold


def thread_ladder(max_threads: int) -> list[int]:
    """1, 2, 4, ... and max_threads itself: the settings the hill-climb may visit."""
    ladder, threads = [], 1
    while threads < max_threads:
        ladder.append(threads)
        threads *= 2
    ladder.append(max_threads)
    return ladder


def max_prefetch_for(memory_budget: int, slot_bytes: int) -> int:
    """The deepest prefetch whose ring (prefetch + 1 slots) fits the budget, capped."""
    return min(MAX_AUTO_PREFETCH, memory_budget // max(slot_bytes, 1) - 1)


@dataclass(frozen=True)
class Setting:
    """What the producer should run with before its next batch."""

    threads: int
    prefetch: int


class AutoTuner:
    """Measures, adjusts and settles; fed by the producer and the consumer threads.

    `threads=None` tunes threads up to `max_threads`; an int keeps it fixed. The same for
    `prefetch` up to `max_prefetch` (starting at min(2, max_prefetch)). A tuner with both fixed
    is "off".
    """

    def __init__(self, threads: int | None, max_threads: int, prefetch: int | None,
                 max_prefetch: int) -> None:
        self._lock = threading.Lock()
        self._ladder = thread_ladder(max_threads)
        self._tune_threads = threads is None
        self._tune_prefetch = prefetch is None
        self.max_prefetch = max_prefetch
        self.threads = self._ladder[0] if threads is None else threads
        self.prefetch = min(2, max_prefetch) if prefetch is None else prefetch
        self.measured: dict[int, float] = {}  # threads -> median producer seconds per image
        self._samples: dict[int, list[float]] = {}  # per image, in the running comparison
        self._best = self.threads
        self._rival: int | None = None
        self._schedule: list[int] = []  # thread counts of the comparison's next blocks
        self._in_block = 0
        self._batch_images = 0
        self._skip = WARMUP_BATCHES
        self._steps: list[float] = []  # consumer's own time per batch (its training step)
        self._window = {"wait": 0.0, "step": 0.0, "slot_wait": 0.0, "busy": 0.0, "batches": 0}
        self.batches_seen = 0
        self.settled_after: int | None = None
        self._phase = "done"
        if not self._tune_threads and not self._tune_prefetch:
            self.state = "off"
        else:
            self.state = "measuring"
            self._phase = "threads" if self._tune_threads else "prefetch"

    def setting(self) -> Setting:
        with self._lock:
            return Setting(self.threads, self.prefetch)

    @staticmethod
    def max_batches_to_settle(max_threads: int, max_prefetch: int) -> int:
        """An upper bound on the produced batches a tuner needs to settle (for tests, docs)."""
        blocks = 1 + 3 * (len(thread_ladder(max_threads)) - 1)
        thread_batches = blocks * (WARMUP_BATCHES + MEASURE_BATCHES)
        doublings = max(max_prefetch, 1).bit_length()
        # + the ring's depth: consumed windows lag produced batches by at most the prefetch.
        return thread_batches + (doublings + 1) * PREFETCH_WINDOW + max_prefetch + 1

    # -- producer side ----------------------------------------------------------------------

    def record_produce(self, busy_s: float, slot_wait_s: float, images: int) -> None:
        """One batch made: its read+plan+decode seconds and its wait for a free ring slot."""
        with self._lock:
            self.batches_seen += 1
            self._window["slot_wait"] += slot_wait_s
            self._window["busy"] += busy_s
            if self.state != "measuring" or self._phase != "threads" or images < 1:
                return
            if self._skip > 0:
                self._skip -= 1
                return
            self._samples.setdefault(self.threads, []).append(busy_s / images)
            self._batch_images = max(self._batch_images, images)  # an epoch's last is short
            self._in_block += 1
            if self._in_block < MEASURE_BATCHES:
                return
            self._in_block = 0
            if self._schedule:
                self._switch(self._schedule.pop(0))
            else:
                self._decide_threads()

    def _switch(self, threads: int) -> None:
        if threads != self.threads:
            self._skip = WARMUP_BATCHES
        self.threads = threads

    def _decide_threads(self) -> None:
        """End of a comparison: keep the winner, then climb one rung or settle."""
        medians = {t: statistics.median(v) for t, v in self._samples.items()}
        self.measured.update(medians)
        rival = self._rival
        if rival is not None and medians[rival] * GAIN <= medians[self._best]:
            self._best = rival
        best = self._best
        step = statistics.median(self._steps[-2 * MEASURE_BATCHES:]) if self._steps else 0.0
        keeps_up = step > 0 and medians[best] * self._batch_images < ENOUGH * step
        rival_lost = rival is not None and best != rival
        if rival_lost or keeps_up or best >= self._ladder[-1]:
            self._switch(best)
            self._end_phase()
            return
        # Next comparison, interleaved in time (best, rival, best, rival) so that load from
        # other processes, which drifts over seconds, falls on both settings alike.
        self._rival = self._ladder[self._ladder.index(best) + 1]
        self._samples = {best: self._samples[best][-MEASURE_BATCHES:]}
        self._schedule = [best, self._rival]
        self._switch(self._rival)

    # -- consumer side ----------------------------------------------------------------------

    def record_consume(self, wait_s: float, step_s: float) -> None:
        """One batch taken: how long the consumer waited for it and its own time afterwards."""
        with self._lock:
            self._steps.append(step_s)
            del self._steps[:-16]  # the recent ones are all a decision needs
            if self.state != "measuring" or self._phase != "prefetch":
                return
            self._window["wait"] += wait_s
            self._window["step"] += step_s
            self._window["batches"] += 1
            if self._window["batches"] >= PREFETCH_WINDOW:
                self._decide_prefetch()

    def _decide_prefetch(self) -> None:
        window = self._window
        consumer = window["wait"] + window["step"]
        producer = window["busy"] + window["slot_wait"]
        consumer_waited = consumer > 0 and window["wait"] / consumer > BURSTY
        producer_blocked = producer > 0 and window["slot_wait"] / producer > BURSTY
        self._reset_window()
        if consumer_waited and producer_blocked and self.prefetch * 2 <= self.max_prefetch:
            self.prefetch *= 2
            return
        self._end_phase()

    def _reset_window(self) -> None:
        self._window = dict.fromkeys(self._window, 0.0)
        self._window["batches"] = 0

    def _end_phase(self) -> None:
        if self._phase == "threads" and self._tune_prefetch:
            self._phase = "prefetch"
            self._reset_window()
            return
        self.state = "settled"
        self.settled_after = self.batches_seen

    def summary(self) -> dict[str, Any]:
        """State, current setting and the measured ms per image per thread count."""
        with self._lock:
            return {"autotune_state": self.state, "num_threads": self.threads,
                    "prefetch": self.prefetch,
                    "autotune_ms_per_image": {t: round(v * 1000, 4)
                                              for t, v in sorted(self.measured.items())}}


def make_tuner(num_threads: Any, prefetch: Any, memory_budget: Any, max_threads: int,
               slot_bytes: int) -> AutoTuner:
    """Check the loader's num_threads / prefetch / memory_budget and build its tuner."""
    threads = None if num_threads == AUTO else _positive("num_threads", num_threads)
    depth = None if prefetch == AUTO else _positive("prefetch", prefetch)
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else _positive(
        "memory_budget", memory_budget)
    max_prefetch = max_prefetch_for(budget, slot_bytes)
    if depth is None and max_prefetch < 1:
        raise invalid_argument(
            "memory_budget", budget, f"prefetch='auto' needs room for 2 ring slots of "
            f"{slot_bytes} bytes each", f"Pass memory_budget >= {2 * slot_bytes}, a smaller "
            "batch_size, or a fixed prefetch=1.")
    return AutoTuner(threads, max(1, max_threads), depth, max(1, max_prefetch))


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise invalid_type(name, value, f"an int >= 1 or {AUTO!r}")
    if value < 1:
        raise invalid_argument(name, value, "must be >= 1", f"Pass {name} >= 1 or {AUTO!r}.")
    return int(value)
