"""RemoteBatches: one pass's batches shared between the trainer's own decode and the remote
workers, handed to the producer (loader/pipeline/producer.py) in plan order.

It is a BatchFiller wrapping the local one. The producer decodes every batch no worker holds;
each worker is kept three batches deep, given batches far enough ahead of the producer to be back
in time (loader/remote/schedule.py says which), and at most `window` batches are on the workers
at a time, so the object store never holds more. Binding is late: when the producer comes to a
batch a worker has not delivered, it takes the batch back (cancelled on the worker when still
queued there) rather than wait longer than a local decode. A remote batch is the local filler's
batch made on the worker from the same plan (a pure function of seed, epoch, rank and batch
number): the trainer copies it into its ring slot, so the output is the local loader's, bit for
bit, whoever made each batch. With local=False every batch goes to the workers, in order.

A worker lost (its actor or node dead) has its batches redone by the others or here; with none
left, on_lost="local" decodes here (with a warning) and "raise" raises RemoteWorkersLostError
once lost_timeout passed without a worker. A worker's error is raised as the local loader raises
it: a read, plan or masks failure as StageError (the producer names the stage and batch), a
decode failure as itself.
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
from fastloader.loader.remote import schedule
from fastloader.loader.remote.cluster import Worker, WorkerPool
from fastloader.loader.remote.worker import Outcome

log = logging.getLogger(__name__)

Prepared = TypeVar("Prepared")
Batch = TypeVar("Batch", bound=Filled)
_pass_keys = itertools.count()
_POLL_S = 0.05  # how often a wait looks at the stop flag and at lost or joining workers
# batches a worker holds beside the local decode: one running and two queued, so it keeps busy
# though the trainer only sees a delivery between its own batches (and takes back what is late)
_DEPTH = 3


@dataclass(eq=False)
class Assignment:
    """Batch `batch` on `worker` (its ObjectRef), and what came back once it did."""

    batch: int
    worker: Worker
    ref: Any
    outcome: Outcome | None = None
    failure: BaseException | None = None  # the worker's own code failed on it

    @property
    def delivered(self) -> bool:
        return self.outcome is not None or self.failure is not None


@dataclass(frozen=True)
class Ticket(Generic[Prepared]):
    """prepare()'s answer: whether a worker held batch b then, and the local preparation
    of a local batch."""

    batch: int
    remote: bool
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
        self._held: dict[int, Assignment] = {}  # batches on the workers, sent or delivered
        self._orphans: list[Assignment] = []  # taken back while their worker ran them
        self._position = batches.start  # the batch the producer fills next
        self._claimed = batches.start - 1  # batches up to this one are the trainer's own
        self._end = batches.stop
        self._lock = threading.RLock()
        self._gone_since: float | None = None  # since when no worker was live or starting
        self._warned = False

    def watch(self, stop_event: threading.Event) -> None:
        """Stop waiting for workers when the producer is stopped."""
        self.stop_event = stop_event

    # -- the producer's side ----------------------------------------------------------------

    def prepare(self, b: int) -> Ticket[Prepared]:
        with self._lock:
            self._refresh()
            here = b not in self._held and (self.options.local or self._decode_here())
            if here:  # the trainer's, before the workers are given more
                self._claimed = max(self._claimed, b)
            self._feed()
        remote = not here  # remote only: b is given out in fill when no worker took it yet
        return Ticket(b, remote, None if remote else self.local.prepare(b))

    def fill(self, b: int, slot: int | None, ticket: Ticket[Prepared]) -> Batch:
        try:
            self._check_gone(b)
            outcome = self._await(b) if ticket.remote else None
            if outcome is None:
                return self._fill_here(b, slot, None if ticket.remote else ticket.prepared)
            if outcome.error is not None:
                if outcome.stage in ("read", "plan", "masks"):
                    raise StageError(outcome.stage, b) from outcome.error
                raise outcome.error
            return self._absorb(b, slot, outcome.payload)
        finally:
            with self._lock:
                self._held.pop(b, None)
                self._position = b + 1
                if not self.stop_event.is_set():
                    self._refresh()
                    self._feed()

    def _absorb(self, b: int, slot: int | None, payload: Any) -> Batch:
        """A worker's batch taken in, its cost measured (schedule.Costs.absorb_s)."""
        started = time.perf_counter()
        batch = self.absorb(b, slot, payload)
        with self._lock:
            self.pool.absorb_s = schedule.smoothed(self.pool.absorb_s,
                                                   time.perf_counter() - started)
        return batch

    def _fill_here(self, b: int, slot: int | None, prepared: Prepared | None) -> Batch:
        """Batch b by the local filler (prepared now when it was meant for a worker)."""
        started = time.perf_counter()
        if prepared is None:
            with self._lock:
                self._claimed = max(self._claimed, b)
            prepared = self.local.prepare(b)
        batch = self.local.fill(b, slot, prepared)
        tally = self.pool.local
        seconds = time.perf_counter() - started
        with self._lock:
            tally.batches += 1
            tally.decode_s += seconds
            tally.batch_s = schedule.smoothed(tally.batch_s, seconds)
        return batch

    # -- who makes which batch --------------------------------------------------------------

    def _feed(self) -> None:
        """Give live workers batches while each holds fewer than its depth (_DEPTH beside the
        local decode, the window's worth with local=False) and the window has room."""
        live = self.pool.live()
        depth = _DEPTH if self.options.local else self.options.in_flight
        now = time.perf_counter()
        while len(self._held) < self.options.in_flight:
            ready = [w for w in live if len(w.pending) < depth]
            if not ready:
                return
            worker = min(ready, key=lambda w: (len(w.pending), w.number))
            n = self._next_for(worker, now)
            if n is None:
                return
            ref = worker.actor.run.remote(self.key, self.plan_ref, n)
            if not worker.pending:
                worker.running_since = now
            worker.pending.append(n)
            self._held[n] = Assignment(n, worker, ref)

    def _next_for(self, worker: Worker, now: float) -> int | None:
        """The batch the worker gets next (schedule.next_for_worker; in order, remote only)."""
        if not self.options.local:
            return schedule.next_in_order(self._position, self._end, self._held)
        costs = schedule.Costs(self.pool.local.batch_s, self.pool.absorb_s)
        eta = schedule.seconds_to_finish(self._holding(worker), now, costs.local_s)
        return schedule.next_for_worker(self._position, self._claimed, self._end, self._held,
                                        costs, eta)

    @staticmethod
    def _holding(worker: Worker) -> schedule.Holding:
        return schedule.Holding(tuple(worker.pending), worker.running_since, worker.batch_s)

    def _decode_here(self) -> bool:
        """Every worker is gone (none live or starting) and on_lost="local" carries on here."""
        return self._gone_since is not None and self.options.on_lost == "local"

    # -- what came back ---------------------------------------------------------------------

    def _refresh(self) -> None:
        """Take in joined workers and delivered batches; note when no worker is left."""
        self.pool.poll()
        waiting = {a.ref: a for a in (*self._held.values(), *self._orphans) if not a.delivered}
        if waiting:
            ready, _ = self.pool.ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
            for ref in ready:
                self._collect(waiting[ref])
        self._orphans = [a for a in self._orphans if not a.delivered]
        if self.pool.live() or self.pool.starting():
            self._gone_since = None
        elif self._gone_since is None:
            self._gone_since = time.monotonic()
            if self.options.on_lost == "local" and not self._warned:
                self._warned = True
                log.warning("every remote worker is gone: the trainer decodes the remaining "
                            "batches itself (Remote(on_lost='local'))")

    def _collect(self, assignment: Assignment) -> None:
        """A delivered batch's outcome fetched (so it outlives its node), its worker's
        counters and estimate updated; a lost worker's batches handed on."""
        ray, worker = self.pool.ray, assignment.worker
        try:
            outcome: Outcome = ray.get(assignment.ref)
        except self.pool.lost_errors as exc:
            self._lost(worker, exc)
            return
        except ray.exceptions.TaskCancelledError:  # cancelled there: given out again
            self._settle(assignment)
            if self._held.get(assignment.batch) is assignment:
                del self._held[assignment.batch]
            return
        except ray.exceptions.RayTaskError as exc:  # the worker's own code failed
            self._settle(assignment)
            assignment.failure = FastloaderError(
                f"remote worker {worker.number} failed on batch {assignment.batch}: {exc}")
            assignment.failure.__cause__ = exc
            return
        self._settle(assignment)
        worker.batch_s = schedule.smoothed(worker.batch_s, outcome.seconds)
        assignment.outcome = outcome  # delivered: not looked at again
        if self._held.get(assignment.batch) is not assignment:
            return  # made for nothing: taken back (or handed on) meanwhile
        worker.batches += 1
        worker.decode_s += outcome.seconds
        worker.nbytes += outcome.nbytes

    def _settle(self, assignment: Assignment) -> None:
        """The assignment is off its worker: the next one it holds is running from now."""
        worker = assignment.worker
        with contextlib.suppress(ValueError):
            worker.pending.remove(assignment.batch)
        worker.running_since = time.perf_counter() if worker.pending else None

    # -- waiting for a worker's batch -------------------------------------------------------

    def _await(self, b: int) -> Outcome | None:
        """Batch b's outcome from its worker, redone elsewhere if the worker is lost; None
        when it is decoded here (taken back, or every worker gone with on_lost="local")."""
        waited = 0.0
        while not self.stop_event.is_set():
            with self._lock:
                self._refresh()
                self._check_gone(b)
                assignment = self._held.get(b)
                if assignment is None and (self.options.local or self._decode_here()):
                    return None  # its worker was lost: made here
                if assignment is None:
                    self._feed()  # remote only: to a live worker, if any
                    assignment = self._held.get(b)
                elif assignment.delivered:
                    return self._delivered(assignment)
                elif self.options.local and schedule.take_back(
                        self._holding(assignment.worker), assignment.batch,
                        time.perf_counter(), self.pool.local.batch_s, waited):
                    self._take_back(assignment)
                    return None
            if assignment is None:
                self.pool.poll(_POLL_S)
                continue
            waited += self._wait(assignment)
        raise FastloaderError("the pass was stopped while it waited for a remote worker")

    def _wait(self, assignment: Assignment) -> float:
        """Up to a poll's time for the assignment's worker (counted as its wait); seconds."""
        started = time.perf_counter()
        self.pool.ray.wait([assignment.ref], timeout=_POLL_S)
        seconds = time.perf_counter() - started
        with self._lock:
            assignment.worker.wait_s += seconds
        return seconds

    def _delivered(self, assignment: Assignment) -> Outcome:
        if assignment.failure is not None:
            raise assignment.failure
        assert assignment.outcome is not None
        return assignment.outcome

    def _take_back(self, assignment: Assignment) -> None:
        """The producer decodes the batch itself: cancelled on the worker while queued there;
        left to finish when running (a sync actor's call cannot be stopped), for nothing."""
        worker = assignment.worker
        worker.taken_back += 1
        del self._held[assignment.batch]
        if worker.pending and worker.pending[0] == assignment.batch:
            self._orphans.append(assignment)
            return
        with contextlib.suppress(ValueError):
            worker.pending.remove(assignment.batch)
        self._cancel(assignment.ref)

    def _cancel(self, ref: Any) -> None:
        """Cancel a call queued on a worker; nothing once Ray is down (at exit Ray's own hook
        may run before the loader's close): its calls went with it, and a Ray call then would
        start a new local instance (Ray's auto-init), slowing the exit by seconds."""
        ray = self.pool.ray
        if ray.is_initialized():
            with contextlib.suppress(Exception):
                ray.cancel(ref)

    def _lost(self, worker: Worker, error: BaseException) -> None:
        """Worker lost: its batches not delivered go back to be given out again, in order."""
        if worker.state != "lost":
            log.warning("remote worker %d (node %s) lost: %s; its %d batches are redone "
                        "elsewhere", worker.number, worker.node, type(error).__name__,
                        len(worker.pending))
            self.pool.lose(worker)
        for n in worker.pending:
            assignment = self._held.get(n)
            if assignment is not None and assignment.worker is worker:
                del self._held[n]
                worker.redone += 1
        worker.pending.clear()
        worker.running_since = None
        self._orphans = [a for a in self._orphans if a.worker is not worker]
        self._feed()

    def _check_gone(self, b: int) -> None:
        """on_lost="raise": RemoteWorkersLostError once no worker was live for lost_timeout."""
        since = self._gone_since
        timeout = self.options.lost_timeout
        if self.options.on_lost != "raise" or since is None:
            return
        if time.monotonic() - since > timeout:
            raise RemoteWorkersLostError(
                f"no remote worker was live for {timeout:g} s at batch {b} "
                f"({len(self.pool.workers)} started, all lost). Pass Remote(on_lost='local') "
                "to carry on decoding on the trainer, add workers (loader.remote.add()), or "
                "raise lost_timeout.")

    def cancel(self) -> None:
        """The pass ended: drop its batches still queued on the workers."""
        with self._lock:
            for assignment in self._held.values():
                if not assignment.delivered:
                    self._cancel(assignment.ref)
            for worker in self.pool.workers:
                worker.pending.clear()
                worker.running_since = None
            self._held.clear()
            self._orphans.clear()
