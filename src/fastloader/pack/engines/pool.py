"""The local engine's process pool: workers that end when the pool stops them, never while
holding one of its queues' locks, and a stop that ends by itself whatever went wrong.

multiprocessing.Pool.terminate() takes the task queue's read lock and the result queue's
write lock; a worker that died holding either (signalled half-way through a put or a get)
leaves them held forever, and terminate() then waits forever. So a pool worker here ends on
its pool's stop only inside a job (where it holds nothing shared) or at a point of its own
queue calls where it holds no lock (GuardedQueue); and the stop itself (stop_pool) is bounded:
once every worker is gone, terminate() has _SETTLE_S to finish, else it is left behind in its
thread (it can only be waiting on a lock or a message that a dead worker left).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.pool
import multiprocessing.queues
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from multiprocessing.synchronize import Lock
from types import FrameType
from typing import Protocol, TypeVar

W = TypeVar("W")
R = TypeVar("R")


class Flag(Protocol):
    """A pool's shared "stopping" byte (a RawValue)."""

    value: int


_STOPPING: Flag | None = None  # a worker's view of its pool's "stopping" flag (shared memory)
_IN_JOB = False  # whether this worker is inside an item's job (holding no queue lock)
_PENDING = False  # its pool stopped it outside a job: it ends at its next lock-free point
_POLL_S = 0.1  # how often a worker waiting for a queue's lock looks at _PENDING

_WATCH_S = 0.5  # between SIGTERMs to the workers a stopped pool still has
_KILL_AFTER_S = 10.0  # then SIGKILL (a job stuck in C code that never returns to Python)
_SETTLE_S = 5.0  # once every worker is gone, what terminate() has left to finish


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _PENDING
    if _STOPPING is None or not _STOPPING.value:
        return  # from outside (a scheduler, the group): the parent decides
    if _IN_JOB:
        os._exit(128 + signum)
    _PENDING = True  # maybe inside a queue's lock: GuardedQueue ends it once released


def _end_if_stopped() -> None:
    """End this worker if its pool stopped it (called where it holds no queue lock)."""
    if _PENDING:
        os._exit(128 + signal.SIGTERM)


def worker_signals(stopping: Flag) -> None:
    """A pool worker's initializer: the worker ends when its pool stops it, never on a signal
    from outside. A scheduler's SIGTERM reaches every process of the job (SLURM) and Ctrl-C's
    SIGINT the whole process group: a worker killed there, at any point, can die holding a
    queue's lock or half-way through writing a result, and Pool.terminate() then waits forever
    (on the lock, on the rest of the message), besides the worker's traceback or
    BrokenPipeError. So SIGINT is ignored, and SIGTERM ends the worker only once `stopping` is
    set, which the parent does before it stops the pool: at once inside a job, else at its
    next point holding no lock (GuardedQueue). A forked worker also inherits its parent's
    Python handlers (packdata's; ray.init's, left after shutdown), which would not end it."""
    global _STOPPING
    _STOPPING = stopping
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_job(job: Callable[[W], R], work: W) -> R:
    """job(work) in a pool worker, marked as inside a job for _on_sigterm."""
    global _IN_JOB
    _IN_JOB = True
    try:
        return job(work)
    finally:
        _IN_JOB = False


def _acquire(lock: Lock) -> None:
    """Take a queue's lock, ending the worker instead if its pool stops it meanwhile (a
    worker waits here for good once terminate() holds the task queue's read lock)."""
    _end_if_stopped()
    while not lock.acquire(timeout=_POLL_S):
        _end_if_stopped()


class GuardedQueue(multiprocessing.queues.SimpleQueue):
    """SimpleQueue whose get and put (a worker's side) end the worker on its pool's stop only
    where it holds neither lock: a SIGTERM while it holds one (waiting for a task, sending a
    result) is acted on once the lock is released, so terminate() never waits on it."""

    # SimpleQueue's own attributes (typeshed declares none of them)
    _rlock: Lock
    _wlock: Lock | None
    _reader: Connection
    _writer: Connection

    def get(self) -> object:
        _acquire(self._rlock)
        try:
            res = self._reader.recv_bytes()
        finally:
            self._rlock.release()
        _end_if_stopped()
        return ForkingPickler.loads(res)

    def put(self, obj: object) -> None:
        data = ForkingPickler.dumps(obj)
        assert self._wlock is not None  # None on Windows only
        _acquire(self._wlock)
        try:
            self._writer.send_bytes(data)
        finally:
            self._wlock.release()
        _end_if_stopped()


class GuardedPool(multiprocessing.pool.Pool):
    """A Pool whose task and result queues are GuardedQueues."""

    _ctx: BaseContext  # Pool's own attributes (typeshed declares none of them)
    _pool: list[BaseProcess]
    _inqueue: GuardedQueue
    _outqueue: GuardedQueue
    _quick_put: Callable[[object], None]
    _quick_get: Callable[[], object]

    def _setup_queues(self) -> None:  # as Pool's, with the guarded class
        self._inqueue = GuardedQueue(ctx=self._ctx)
        self._outqueue = GuardedQueue(ctx=self._ctx)
        self._quick_put = self._inqueue._writer.send
        self._quick_get = self._outqueue._reader.recv


def open_pool(workers: int, fork: bool) -> tuple[GuardedPool, Flag]:
    """A pool of `workers` (forked or the platform's default start) and its stopping flag."""
    context = multiprocessing.get_context("fork" if fork else None)
    stopping = context.RawValue("b", 0)
    pool = GuardedPool(workers, initializer=worker_signals, initargs=(stopping,),
                       context=context)
    return pool, stopping


def stop_pool(pool: GuardedPool, stopping: Flag) -> None:
    """Stop the pool (done, failed or interrupted), bounded: its workers are told (stopping)
    and signalled until gone (_watch_stop), and terminate() runs in a thread this waits for
    only until _SETTLE_S after the last worker is gone."""
    stopping.value = 1
    stopper = threading.Thread(target=pool.terminate, name="fastloader-pool-terminate",
                               daemon=True)
    stopper.start()
    done = _watch_stop(pool, stopper)  # on a second Ctrl-C here it watches on, to the end
    gone_for = 0.0
    while stopper.is_alive() and gone_for < _SETTLE_S:
        stopper.join(_WATCH_S)
        gone_for = gone_for + _WATCH_S if not _alive(pool) else 0.0
    # still alive: terminate() waits on a lock or a message a dead worker left (one killed
    # from outside half-way through a put): left behind, a daemon thread, its finalizer spent
    done.set()


def _alive(pool: GuardedPool) -> list[BaseProcess]:
    """The pool's workers still running, told by their sentinels (readable once they exit),
    never by pid alone: a worker the pool reaped already is not signalled."""
    return [process for process in list(pool._pool)  # Pool keeps no public list
            if not multiprocessing.connection.wait([process.sentinel], 0)]


def _watch_stop(pool: GuardedPool, stopper: threading.Thread) -> threading.Event:
    """While the pool stops (stopper runs its terminate()), SIGTERM the workers still alive
    every _WATCH_S (terminate()'s one signal comes late, after its puts, and can come before
    the worker acts on it), SIGKILL after _KILL_AFTER_S; set the event returned to end the
    watch sooner."""
    done = threading.Event()

    def watch() -> None:
        waited = 0.0
        while stopper.is_alive() and not done.wait(_WATCH_S):
            waited += _WATCH_S
            for process in _alive(pool):
                if process.pid is None:  # never started (Pool starts each before keeping it)
                    continue
                with contextlib.suppress(OSError, ValueError):
                    os.kill(process.pid, signal.SIGKILL if waited >= _KILL_AFTER_S
                            else signal.SIGTERM)

    threading.Thread(target=watch, name="fastloader-pool-stop", daemon=True).start()
    return done
