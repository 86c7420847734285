"""RemoteBatches: one pass's batches shared between the trainer's own decode and the remote
workers, handed to the producer (loader/pipeline/producer.py) in plan order.

It is a BatchFiller wrapping the local one. Each batch is given, in order, to the local decode
or to a worker: the trainer's share follows the measured rates (the local threads keep their
cores busy and the workers add to them), and at most `window` batches are on the workers at a
time, so the object store never holds more. A remote batch is the local filler's batch made on
the worker from the same plan (a pure function of seed, epoch, rank and batch number): the
trainer copies it into its ring slot, so the output is the local loader's, bit for bit.

A worker lost (its actor or node dead) has its batches redone by the others, in order; with
none left, on_lost="local" decodes them here (with a warning) and "raise" raises
RemoteWorkersLostError once lost_timeout passed without a worker. A worker's error is raised
as the local loader raises it: a read, plan or masks failure as StageError (the producer names
the stage and batch), a decode failure as itself.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastloader.errors import FastloaderError, RemoteWorkersLostError
from fastloader.loader.pipeline.producer import BatchFiller, Filled, StageError
from fastloader.loader.remote.cluster import Worker, WorkerPool
from fastloader.loader.remote.worker import Outcome

log = logging.getLogger(__name__)

Prepared = TypeVar("Prepared")
Batch = TypeVar("Batch", bound=Filled)
_pass_keys = itertools.count()
_POLL_S = 0.05  # how often a wait looks at the stop flag and at lost or joining workers
_EMA = 0.3  # weight of the newest batch in a rate estimate


@dataclass
class Assignment:
    """Who makes batch b: the local decode (local), a worker (its ref), or nobody yet (a
    remote batch whose worker was lost, or that waits for a first worker)."""

    batch: int
    local: bool
    worker: Worker | None = None
    ref: Any = None


@dataclass(frozen=True)
class Ticket(Generic[Prepared]):
    """prepare()'s answer: the local preparation of a local batch (None for a remote one)."""

    batch: int
    prepared: Prepared | None


class RemoteBatches(Generic[Prepared, Batch]):
    """The pass's batches from `local` and the pool's workers; absorb(b, slot, payload) turns
    a worker's payload into the queued batch (copied into the ring slot)."""

    def __init__(self, local: BatchFiller[Prepared, Batch],
                 absorb: Callable[[int, int | None, Any], Batch], pool: WorkerPool, plan: Any,
                 batches: range) -> None:
        self.local, self.absorb, self.pool = local, absorb, pool
        self.read_ahead = local.read_ahead
        self.options = pool.options
        self.key = next(_pass_keys)
        self.plan_ref = [pool.ray.put(plan)]  # fetched by each worker once this pass
        self.stop_event = threading.Event()  # the producer's, once watch() was called
        self._assigned: dict[int, Assignment] = {}
        self._next, self._end = batches.start, batches.stop
        # the local decode takes a pass's first batch: the workers' first batches of the pass
        # (the plan fetched, the window filled) come while it decodes, not before it starts
        self._credit = 1.0
        self._lock = threading.RLock()
        self._warned = False

    def watch(self, stop_event: threading.Event) -> None:
        """Stop waiting for workers when the producer is stopped."""
        self.stop_event = stop_event

    # -- the producer's side ----------------------------------------------------------------

    def prepare(self, b: int) -> Ticket[Prepared]:
        with self._lock:
            self._assign_through(b)
            local = self._assigned[b].local
        return Ticket(b, self.local.prepare(b) if local else None)

    def fill(self, b: int, slot: int | None, ticket: Ticket[Prepared]) -> Batch:
        try:
            outcome = None if self._assigned[b].local else self._await(b)
            if outcome is None:
                return self._fill_here(b, slot, ticket.prepared)
            if outcome.error is not None:
                if outcome.stage in ("read", "plan", "masks"):
                    raise StageError(outcome.stage, b) from outcome.error
                raise outcome.error
            return self.absorb(b, slot, outcome.payload)
        finally:
            with self._lock:
                self._assigned.pop(b, None)
                if not self.stop_event.is_set():
                    self._assign_through(b + 1)

    def _fill_here(self, b: int, slot: int | None, prepared: Prepared | None) -> Batch:
        """Batch b by the local filler (prepared now when it was meant for a worker)."""
        started = time.perf_counter()
        if prepared is None:
            prepared = self.local.prepare(b)
        batch = self.local.fill(b, slot, prepared)
        tally = self.pool.local
        seconds = time.perf_counter() - started
        with self._lock:
            tally.batches += 1
            tally.decode_s += seconds
        return batch

    # -- who makes which batch --------------------------------------------------------------

    def _assign_through(self, b: int) -> None:
        """Give out every batch up to b, and those after it while the window has room."""
        self.pool.poll()
        window = self.options.in_flight
        while self._next < self._end:
            n = self._next
            if n > b and (self._remote_count() >= window or n > b + window):
                return
            self._assigned[n] = self._choose(n, forced=n <= b)
            self._next += 1

    def _choose(self, n: int, forced: bool) -> Assignment:
        live = self.pool.live()
        if live and (not self.options.local or self._remote_turn(live)) and (
                self._remote_count() < self.options.in_flight or not self.options.local):
            return self._submit(Assignment(n, False), live)
        if not live and not self.options.local and not self._all_lost():
            return Assignment(n, False)  # remote only: waits for a worker in _await
        return Assignment(n, True)

    def _remote_turn(self, live: list[Worker]) -> bool:
        """Whether batch n goes to a worker: each side's share is its measured rate's (until
        a rate is measured, a worker counts as the local decode does)."""
        local = self.pool.local
        local_s = local.decode_s / local.batches if local.batches else None
        known = [w.decode_s / w.batches for w in live if w.batches]
        guess = local_s or (sum(known) / len(known) if known else 1.0)  # s a batch, unmeasured
        local_rate = 1.0 / (local_s or guess)
        remote_rate = sum(1.0 / (w.decode_s / w.batches if w.batches else guess) for w in live)
        self._credit += local_rate / (local_rate + remote_rate)  # the local share, batch by batch
        if self._credit >= 1.0:
            self._credit -= 1.0
            return False
        return True

    def _remote_count(self) -> int:
        return sum(1 for a in self._assigned.values() if a.worker is not None)

    def _submit(self, assignment: Assignment, live: list[Worker]) -> Assignment:
        """Send the batch to the live worker holding the fewest batches."""
        worker = min(live, key=lambda w: (len(w.in_flight), w.number))
        assignment.worker = worker
        assignment.ref = worker.actor.run.remote(self.key, self.plan_ref, assignment.batch)
        worker.in_flight.add(assignment.batch)
        return assignment

    def _all_lost(self) -> bool:
        """Every worker is gone (none live or starting) and on_lost="local" carries on here."""
        gone = not self.pool.live() and not self.pool.starting()
        if gone and self.options.on_lost == "local":
            if not self._warned:
                self._warned = True
                log.warning("every remote worker is gone: the trainer decodes the remaining "
                            "batches itself (Remote(on_lost='local'))")
            return True
        return False

    # -- waiting for a worker's batch -------------------------------------------------------

    def _await(self, b: int) -> Outcome | None:
        """Batch b's outcome from its worker, redone elsewhere if the worker is lost; None
        when it is to be decoded here (every worker gone, on_lost="local")."""
        waiting_since: float | None = None
        while not self.stop_event.is_set():
            with self._lock:
                assignment = self._assigned[b]
                if assignment.worker is None:
                    self.pool.poll()
                    live = self.pool.live()
                    if live:
                        self._submit(assignment, live)
                    elif self._all_lost():
                        return None
            if assignment.worker is None:
                waiting_since = waiting_since or time.monotonic()
                self._check_lost_timeout(b, waiting_since)
                self.pool.poll(_POLL_S)
                continue
            outcome = self._take(assignment)
            if outcome is not None:
                return outcome
        raise FastloaderError("the pass was stopped while it waited for a remote worker")

    def _take(self, assignment: Assignment) -> Outcome | None:
        """The assignment's outcome if its worker answered within a poll; None to look again
        (not ready yet, or the worker was lost and its batches were handed on)."""
        ray, worker = self.pool.ray, assignment.worker
        assert worker is not None
        started = time.perf_counter()
        ready, _ = ray.wait([assignment.ref], timeout=_POLL_S)
        if not ready:
            worker.wait_s += time.perf_counter() - started
            return None
        try:
            outcome: Outcome = ray.get(assignment.ref)
        except self.pool.lost_errors as exc:
            self._lost(worker, exc)
            return None
        except ray.exceptions.RayTaskError as exc:  # the worker's own code failed
            raise FastloaderError(f"remote worker {worker.number} failed on batch "
                                  f"{assignment.batch}: {exc}") from exc
        with self._lock:
            worker.in_flight.discard(assignment.batch)
            worker.batches += 1
            worker.decode_s += outcome.seconds
            worker.nbytes += outcome.nbytes
            worker.wait_s += time.perf_counter() - started
        return outcome

    def _lost(self, worker: Worker, error: BaseException) -> None:
        """Worker lost: its batches go back to nobody, then to the live workers in order."""
        with self._lock:
            if worker.state != "lost":
                log.warning("remote worker %d (node %s) lost: %s; its %d batches are redone "
                            "by the others", worker.number, worker.node,
                            type(error).__name__, len(worker.in_flight))
                self.pool.lose(worker)
            for n in sorted(worker.in_flight):
                assignment = self._assigned.get(n)
                if assignment is not None and assignment.worker is worker:
                    self._assigned[n] = Assignment(n, False)
                    worker.redone += 1
            worker.in_flight.clear()
            live = self.pool.live()
            for n in sorted(self._assigned):
                assignment = self._assigned[n]
                if not assignment.local and assignment.worker is None and live:
                    self._submit(assignment, live)

    def _check_lost_timeout(self, b: int, since: float) -> None:
        if time.monotonic() - since > self.options.lost_timeout:
            raise RemoteWorkersLostError(
                f"no remote worker was live for {self.options.lost_timeout:g} s while batch "
                f"{b} waited for one ({len(self.pool.workers)} started, all lost). Pass "
                "Remote(on_lost='local') to carry on decoding on the trainer, add workers "
                "(loader.remote.add()), or raise lost_timeout.")

    def cancel(self) -> None:
        """The pass ended: drop its batches still queued on the workers."""
        with self._lock:
            for assignment in self._assigned.values():
                if assignment.worker is not None:
                    assignment.worker.in_flight.discard(assignment.batch)
                    with contextlib.suppress(Exception):
                        self.pool.ray.cancel(assignment.ref)
            self._assigned.clear()
