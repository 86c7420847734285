"""RemoteBatches (loader/remote/dispatch.py) driven step by step over a stand-in for Ray whose
actor calls finish when the test says so: a batch queued on a worker is taken back and cancelled
there, one the worker runs is waited for and then taken back (its late result dropped, once), a
delivered one is taken in, a lost worker's batches are made elsewhere. The cluster tests
(test_remote_workers.py) check the same on a real Ray; these pin down each step."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from fastloader import Remote
from fastloader.loader.remote.cluster import Worker
from fastloader.loader.remote.dispatch import RemoteBatches
from fastloader.loader.remote.worker import Outcome


class TaskCancelledError(Exception):
    pass


class RayTaskError(Exception):
    pass


class ActorDiedError(Exception):
    pass


class Ref:
    """An actor call's result: pending until the test finishes or fails it."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.gets = 0


class StandInRay:
    """What RemoteBatches asks of Ray: put, wait, get, cancel, is_initialized and the exception
    types."""

    exceptions = SimpleNamespace(TaskCancelledError=TaskCancelledError,
                                 RayTaskError=RayTaskError)

    def __init__(self) -> None:
        self.cancelled: list[int] = []
        self.down = False  # ray.shutdown() ran (Ray's exit hook, say)

    def put(self, value: Any) -> Any:
        return value

    def is_initialized(self) -> bool:
        return not self.down

    def wait(self, refs: list[Ref], num_returns: int = 1,
             timeout: float | None = None) -> tuple[list[Ref], list[Ref]]:
        ready = [r for r in refs if r.done]
        if not ready and timeout:
            time.sleep(min(timeout, 0.005))  # the wait the producer's poll would spend
        return ready, [r for r in refs if not r.done]

    def get(self, ref: Ref) -> Any:
        ref.gets += 1
        if ref.error is not None:
            raise ref.error
        return ref.value

    def cancel(self, ref: Ref) -> None:
        self.cancelled.append(ref.batch)
        ref.done, ref.error = True, TaskCancelledError()


class Actor:
    def __init__(self) -> None:
        self.calls: dict[int, Ref] = {}
        self.run = SimpleNamespace(remote=self._run)

    def _run(self, key: int, plan: Any, b: int) -> Ref:
        self.calls[b] = Ref(b)
        return self.calls[b]

    def finish(self, b: int, seconds: float = 0.010) -> None:
        ref = self.calls[b]
        ref.value = Outcome(b, f"pixels {b}", None, "", seconds, seconds, 100)
        ref.done = True

    def die(self, b: int) -> None:
        ref = self.calls[b]
        ref.error, ref.done = ActorDiedError(), True


class Pool:
    """A WorkerPool's face: options, Ray, the live workers and the trainer's tally."""

    def __init__(self, workers: int, **remote: Any) -> None:
        self.options = Remote(workers=workers, **remote)
        self.ray = StandInRay()
        self.lost_errors = (ActorDiedError,)
        self.workers = [Worker(n, Actor(), None, "live") for n in range(workers)]
        self.local = Worker(-1, None, None, "live")
        self.absorb_s: float | None = None

    def poll(self, timeout: float = 0.0) -> None:
        time.sleep(min(timeout, 0.005))

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.state == "live"]

    def starting(self) -> list[Worker]:
        return []

    def lose(self, worker: Worker) -> None:
        worker.state = "lost"


class LocalFiller:
    read_ahead = False

    def prepare(self, b: int) -> int:
        return b

    def fill(self, b: int, slot: int | None, prepared: int) -> tuple[str, int]:
        time.sleep(0.002)  # a local decode's time: a wait past it takes the batch back
        return ("local", b)


def _batches(pool: Pool, count: int = 8) -> RemoteBatches[Any, Any]:
    return RemoteBatches(LocalFiller(), lambda b, slot, payload: ("remote", b, payload),
                         pool, "plan", range(count))


def _next(batches: RemoteBatches[Any, Any], b: int) -> Any:
    return batches.fill(b, 0, batches.prepare(b))


def test_late_batches_are_taken_back_and_a_delivered_one_taken_in() -> None:
    pool = Pool(1)
    batches = _batches(pool)
    worker, actor = pool.workers[0], pool.workers[0].actor
    assert _next(batches, 0) == ("local", 0)
    assert worker.pending == [1, 2, 3]  # nothing measured yet: the nearest, three deep
    # batch 1 runs on the worker: waited for as long as a local decode, then made here
    assert _next(batches, 1) == ("local", 1)
    assert worker.taken_back == 1 and pool.ray.cancelled == []  # running: not cancelled
    # batch 2 is queued behind it: taken back at once and cancelled on the worker
    assert _next(batches, 2) == ("local", 2)
    assert worker.taken_back == 2 and pool.ray.cancelled == [2]
    actor.finish(1)  # the taken-back batch comes back late: dropped, and read only once
    actor.finish(3)
    assert _next(batches, 3) == ("remote", 3, "pixels 3")
    _next(batches, 4)
    assert actor.calls[1].gets == 1
    assert (worker.batches, worker.nbytes) == (1, 100)  # only batch 3 counted as delivered
    assert worker.batch_s == pytest.approx(0.010)


def test_a_lost_workers_batches_are_made_here_or_by_another() -> None:
    pool = Pool(2)
    batches = _batches(pool)
    assert _next(batches, 0) == ("local", 0)
    first, second = pool.workers
    assert (first.pending, second.pending) == ([1, 3, 5], [2, 4, 6])  # fewest-held first
    first.actor.die(1)
    second.actor.finish(2)
    assert _next(batches, 1) == ("local", 1)  # its worker died: made here
    assert first.state == "lost" and first.redone == 3 and first.pending == []
    assert _next(batches, 2) == ("remote", 2, "pixels 2")
    assert _next(batches, 3) == ("local", 3)  # handed back: no worker holds it any more
    assert all(b > 3 for b in second.pending)


def test_remote_only_waits_in_order_and_never_takes_back() -> None:
    pool = Pool(1, local=False, window=2)
    batches = _batches(pool, 3)
    worker, actor = pool.workers[0], pool.workers[0].actor
    ticket = batches.prepare(0)
    assert worker.pending == [0, 1]  # in order, the window's worth
    actor.finish(0)
    assert batches.fill(0, 0, ticket) == ("remote", 0, "pixels 0")
    actor.finish(1)
    assert _next(batches, 1) == ("remote", 1, "pixels 1")
    assert worker.pending == [2] and worker.taken_back == 0


def test_nothing_is_cancelled_once_ray_is_down() -> None:
    """At exit Ray's own hook may shut it down before the loader's close cancels the pass: a
    Ray call then would start a new local instance (Ray's auto-init), so none is made."""
    pool = Pool(1)
    batches = _batches(pool)
    batches.prepare(0)  # the trainer's; the worker is given the next ones
    assert pool.workers[0].pending
    pool.ray.down = True
    batches.cancel()
    assert pool.ray.cancelled == []
    assert not pool.workers[0].pending
