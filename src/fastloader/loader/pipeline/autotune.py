"""Online tuning of a loader's decode threads and prefetch depth during its first batches.

Threads: a step-down search from the top of the ladder (the cores this rank may use) to
..., 4, 2, 1. Decode is CPU-bound and releases the GIL, so all cores is the fastest guess on
nearly every machine: the loader runs there from its first batch, and a short run (a quick
benchmark, a validation pass) never pays for exploring. After EXPLORE_AFTER batches at the
top (sooner when the loader already keeps up with the training step) the next lower rung is
compared with the current one in interleaved blocks (lower, current, lower), each block one
warm-up batch then MEASURE_BATCHES measured ones; the measure is the producer's time per image
(decode, plus any wait for the read-ahead helper: its own work under whatever load the
consumer adds), compared by median. The lower rung wins, and the search steps down again,
when it is as fast within GAIN, or when it still keeps up with the step (the producer needs
under ENOUGH of the step's time): fewer threads then leave cores to the training process.
The search is asymmetric on purpose: stepping down needs the whole interleaved comparison,
so drifting load from other processes cannot push it down; a lower rung CLEAR slower after
its first PROBE_BATCHES measured batch(es) loses at once, which keeps the cost of probing on
a CPU-bound machine to WARMUP_BATCHES + PROBE_BATCHES batches, and errs to the top rung.

Prefetch: after threads settle, windows of PREFETCH_WINDOW consumed batches are watched. When
the consumer waited for batches while the producer also sat blocked on a full ring (its output
is bursty relative to the step), prefetch doubles, within the memory budget; otherwise it
settles. The ring grows only during this settle phase, never afterwards, so memory stays
bounded: at most max_prefetch + 1 slots, max_prefetch chosen at start from the budget.

The tuner never touches pixels: every setting yields identical batches (the decode is
thread-count-free and prefetch only changes how far ahead the producer runs). It is a pure
state machine fed with times (record_produce, record_consume): tests drive it synthetically.
"""

from __future__ import annotations

import logging
import statistics
import threading
from dataclasses import dataclass
from typing import Any

from fastloader.checks import int_at_least
from fastloader.errors import invalid_argument

log = logging.getLogger(__name__)  # a child of the "fastloader" logger

AUTO = "auto"
WARMUP_BATCHES = 1  # after a change of setting (thread pool restart, caches), not measured
MEASURE_BATCHES = 3  # batches measured per block; the median is kept
# A probe costs WARMUP_BATCHES + PROBE_BATCHES batches at the lower rung, at most twice as
# slow (it has at least half the threads): after EXPLORE_AFTER batches at the top that is
# at most 2 / (24 + 2 * 2) = 7% of a run that ends right after it, less of a longer one.
EXPLORE_AFTER = 24  # batches produced at the top rung before a lower one is first probed
PROBE_BATCHES = 1  # measured batches after which a clearly slower lower rung loses at once
CLEAR = 1.25  # a lower rung this much slower per image than the current one loses at once
GAIN = 1.05  # a lower rung at most 5% slower per image is as fast: its spare cores go free
ENOUGH = 0.7  # the producer needs < 70% of the step time: the loader keeps up
PREFETCH_WINDOW = 6  # consumed batches per prefetch decision
BURSTY = 0.05  # share of time both sides waited on each other that calls for more prefetch
MAX_AUTO_PREFETCH = 16
DEFAULT_MEMORY_BUDGET = 512 * 1024 * 1024  # bytes of ring the auto prefetch may hold


def thread_ladder(max_threads: int) -> list[int]:
    """1, 2, 4, ... and max_threads itself: the settings the search may visit (ascending)."""
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

    `threads=None` tunes threads from `max_threads` down; an int keeps it fixed. The same for
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
        self.threads = self._ladder[-1] if threads is None else threads
        self.prefetch = min(2, max_prefetch) if prefetch is None else prefetch
        self.measured: dict[int, float] = {}  # threads -> median producer seconds per image
        self._samples: dict[int, list[float]] = {}  # per image, in the running comparison
        self._current = self.threads  # the rung the search would settle on now
        self._rival: int | None = None  # the lower rung being compared, None at the baseline
        self._schedule: list[int] = []  # thread counts of the comparison's next blocks
        self._in_block = 0
        self._batch_images = 0
        self._skip = WARMUP_BATCHES
        self._steps: list[float] = []  # consumer's own time per batch (its training step)
        self._window = {"wait": 0.0, "step": 0.0, "slot_wait": 0.0, "busy": 0.0, "batches": 0}
        self.batches_seen = 0
        self.settled_after: int | None = None
        self._phase = "done"
        self.state = "off"
        if self._tune_threads or self._tune_prefetch:
            self.state = "measuring"
            self._phase = "threads" if self._tune_threads else "prefetch"
            if self._tune_threads and len(self._ladder) == 1:
                self._end_phase()  # one usable core: nothing to choose

    @property
    def tunes_prefetch(self) -> bool:
        """Whether prefetch is "auto" (it may deepen up to max_prefetch)."""
        return self._tune_prefetch

    def after_fork(self) -> None:
        """In a forked child: the lock may have been copied held by a parent thread."""
        self._lock = threading.Lock()

    def setting(self) -> Setting:
        with self._lock:
            return Setting(self.threads, self.prefetch)

    @staticmethod
    def max_batches_to_settle(max_threads: int, max_prefetch: int) -> int:
        """An upper bound on the produced batches a tuner needs to settle (for tests, docs)."""
        steps_down = len(thread_ladder(max_threads)) - 1
        thread_batches = 0
        if steps_down:  # the baseline at the top, then up to 3 blocks per rung stepped down
            thread_batches = max(EXPLORE_AFTER, WARMUP_BATCHES + MEASURE_BATCHES)
            thread_batches += steps_down * 3 * (WARMUP_BATCHES + MEASURE_BATCHES)
        doublings = max(max_prefetch, 1).bit_length()
        # + the ring's depth: consumed windows lag produced batches by at most the prefetch.
        return thread_batches + (doublings + 1) * PREFETCH_WINDOW + max_prefetch + 1

    # -- producer side ----------------------------------------------------------------------

    def record_produce(self, busy_s: float, slot_wait_s: float, images: int) -> None:
        """One batch made: its fill seconds (decode + wait for the read-ahead helper) and its
        wait for a free ring slot."""
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
            if self._rival is None:
                self._maybe_start_probe()
                return
            self._in_block += 1
            if self._clear_loss():
                self._settle_threads()
            elif self._in_block >= MEASURE_BATCHES:
                self._in_block = 0
                self._end_block()

    def _switch(self, threads: int) -> None:
        if threads != self.threads:
            self._skip = WARMUP_BATCHES
        self.threads = threads

    def _median(self, threads: int) -> float:
        return statistics.median(self._samples[threads])

    def _keeps_up(self, per_image_s: float) -> bool:
        """Would a producer this fast need under ENOUGH of the consumer's recent step?"""
        step = statistics.median(self._steps[-2 * MEASURE_BATCHES:]) if self._steps else 0.0
        return step > 0 and per_image_s * self._batch_images < ENOUGH * step

    def _maybe_start_probe(self) -> None:
        """At the top rung: probe the next lower one once the baseline has run long enough."""
        recent = self._samples[self._current][-MEASURE_BATCHES:]
        if len(recent) < MEASURE_BATCHES:
            return
        if (self.batches_seen < EXPLORE_AFTER
                and not self._keeps_up(statistics.median(recent))):
            return
        self._samples = {self._current: recent}
        self._probe_below()

    def _probe_below(self) -> None:
        """Compare the current rung with the next lower one: lower, current, lower blocks.

        Interleaved in time so that load from other processes, which drifts over seconds,
        falls on both settings alike.
        """
        index = self._ladder.index(self._current)
        if index == 0:
            self._settle_threads()
            return
        self._rival = self._ladder[index - 1]
        self._schedule = [self._current, self._rival]
        self._in_block = 0
        self._switch(self._rival)

    def _clear_loss(self) -> bool:
        """In the rival's first block: is it already clearly slower (and not keeping up)?"""
        rival = self._rival
        if rival is None or len(self._schedule) != 2 or self._in_block < PROBE_BATCHES:
            return False
        rival_s, current_s = self._median(rival), self._median(self._current)
        if rival_s <= CLEAR * current_s or self._keeps_up(rival_s):
            return False
        self.measured.update({rival: rival_s, self._current: current_s})
        return True

    def _end_block(self) -> None:
        if self._schedule:
            following = self._schedule.pop(0)
            if following == self._current:
                # The decision weighs the current rung's middle block alone against the
                # rival's blocks on either side (A B A): a load that drifts linearly over the
                # comparison, or a spike in the baseline, then falls on both alike.
                self._samples[following] = []
            self._switch(following)
            return
        rival = self._rival
        if rival is None:  # pragma: no cover - a block ends only within a comparison
            return
        medians = {t: self._median(t) for t in self._samples}
        self.measured.update(medians)
        if medians[rival] <= GAIN * medians[self._current] or self._keeps_up(medians[rival]):
            log.info("autotune: %d decode threads are as fast as %d or keep up (%.3f vs "
                     "%.3f ms/image): stepping down", rival, self._current,
                     1000 * medians[rival], 1000 * medians[self._current])
            self._current = rival  # as fast, or fast enough, with fewer threads: step down
            self._samples = {rival: self._samples[rival][-MEASURE_BATCHES:]}
            self._probe_below()  # the rival's block just ran: it is the fresh baseline
            return
        self._settle_threads()

    def _settle_threads(self) -> None:
        self._switch(self._current)
        self._rival = None
        self._schedule = []
        self._end_phase()

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
            log.info("autotune: the consumer waited on a bursty producer: prefetch -> %d",
                     self.prefetch)
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
        log.info("autotune: settled after %d batches on %d decode threads, prefetch %d "
                 "(measured ms/image per thread count: %s)", self.batches_seen, self.threads,
                 self.prefetch, {t: round(v * 1000, 4) for t, v in sorted(self.measured.items())})

    def summary(self) -> dict[str, Any]:
        """State, current setting and the measured ms per image per thread count."""
        with self._lock:
            return {"autotune_state": self.state, "num_threads": self.threads,
                    "prefetch": self.prefetch,
                    "autotune_ms_per_image": {t: round(v * 1000, 4)
                                              for t, v in sorted(self.measured.items())}}


def make_tuner(num_threads: object, prefetch: object, memory_budget: object, max_threads: int,
               slot_bytes: int) -> AutoTuner:
    """Check the loader's num_threads / prefetch / memory_budget and build its tuner."""
    auto = repr(AUTO)
    threads = None if num_threads == AUTO else int_at_least("num_threads", num_threads, 1,
                                                            also=auto)
    depth = None if prefetch == AUTO else int_at_least("prefetch", prefetch, 1, also=auto)
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else int_at_least(
        "memory_budget", memory_budget, 1)
    max_prefetch = max_prefetch_for(budget, slot_bytes)
    if depth is None and max_prefetch < 1:
        raise invalid_argument(
            "memory_budget", budget, f"prefetch='auto' needs room for 2 ring slots of "
            f"{slot_bytes} bytes each", f"Pass memory_budget >= {2 * slot_bytes}, a smaller "
            "batch_size, or a fixed prefetch=1.")
    return AutoTuner(threads, max(1, max_threads), depth, max(1, max_prefetch))
