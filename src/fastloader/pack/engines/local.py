"""The local engine: this machine's processes run a plan's pending shard tasks, for any source.

The items of every pending shard are prepared in plan order on a process pool (so even one
shard uses every core), and each part is written here when its last item is in (the same
part a Ray task writes, pack/staging/build.py). What travels to a worker is the source's
work for an item (pack/sources/base.ItemSource: a tree's file path, an index into a sequence
the forked workers inherit, or a sample); windows of items bound what is in flight. A plain
iterable of samples is read in order here and cut every shard_samples samples, each chunk a
part. Items the source groups by locality (a Parquet row group's cells) travel as runs, each
prepared by one worker, so no group is decoded by two.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.pack.engines.progress import Meter
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.sources.validate import WARNED_LOG
from fastloader.pack.staging.build import build_part
from fastloader.pack.staging.part import Identity, Stage
from fastloader.pack.staging.plan import Spans, TaskSettings, count_bounds

_WINDOW_BYTES = 64 << 20  # source bytes in flight per pool window: bounds memory
_RUN_ITEMS = 256  # at most this many items of one locality travel as one run
_RUN_BYTES = 16 << 20  # and about this many of their bytes (a run's results come back whole)


_STOPPING: Any = None  # a worker's view of its pool's "stopping" flag (shared memory)
_IN_JOB = False  # whether this worker is inside an item's job (holding nothing shared)
_GRACE_S = 2.0  # a worker stopped between jobs first finishes the result it may be writing


def _exit_now(signum: int, frame: Any) -> None:
    os._exit(128 + signal.SIGTERM)


def _on_sigterm(signum: int, frame: Any) -> None:
    if _STOPPING is None or not _STOPPING.value:
        return  # from outside (a scheduler, the group): the parent decides
    if _IN_JOB:
        os._exit(128 + signum)
    # between jobs: maybe half-way through writing a result that the pool's reader is
    # reading; ending now would leave it waiting forever for the rest (a repeated SIGTERM
    # keeps the first deadline)
    if signal.getitimer(signal.ITIMER_REAL)[0] == 0:
        signal.signal(signal.SIGALRM, _exit_now)
        signal.setitimer(signal.ITIMER_REAL, _GRACE_S)


def worker_signals(stopping: Any) -> None:
    """A pool worker's initializer: the worker ends when its pool stops it, never on a signal
    from outside. A scheduler's SIGTERM reaches every process of the job (SLURM) and Ctrl-C's
    SIGINT the whole process group: a worker killed there, at any point, can die holding the
    task queue's lock or half-way through writing a result, and Pool.terminate() then waits
    forever (on the lock, on the rest of the message), besides the worker's traceback or
    BrokenPipeError. So SIGINT is ignored, and SIGTERM ends the worker only once `stopping`
    is set, which the parent does before it stops the pool (terminate() sends SIGTERM to the
    workers still there): at once inside a job, after a grace period between jobs. A forked
    worker also inherits its parent's Python handlers (packdata's; ray.init's, left after
    shutdown), which would not end it at all."""
    global _STOPPING
    _STOPPING = stopping
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_each(job: Callable[[Any], Any], works: list[Any]) -> list[Any]:
    """job over a run of works in one worker, in order."""
    return [job(work) for work in works]


def _run_job(job: Callable[[Any], Any], work: Any) -> Any:
    """job(work) in a pool worker, marked as inside a job for _on_sigterm."""
    global _IN_JOB
    _IN_JOB = True
    try:
        return job(work)
    finally:
        _IN_JOB = False


def _windows(works: Iterable[tuple[Any, int]], limit: int) -> Iterator[list[Any]]:
    """The works in windows of at most `limit` items and about _WINDOW_BYTES of sizes."""
    window: list[Any] = []
    size = 0
    for work, weight in works:
        window.append(work)
        size += weight
        if size >= _WINDOW_BYTES or len(window) >= limit:
            yield window
            window, size = [], 0
    if window:
        yield window


def _pooled(job: Callable[[Any], Any], works: Iterable[tuple[Any, int]], workers: int,
            fork: bool, limit: int, chunk: int | None = None) -> Iterator[Any]:
    """job over the works in order, by a pool holding at most two windows; each worker
    takes `chunk` works at a time (default: a share of the window)."""
    context = multiprocessing.get_context("fork" if fork else None)
    stopping = context.RawValue("b", 0)
    watch: threading.Event | None = None
    try:
        with context.Pool(workers, initializer=worker_signals, initargs=(stopping,)) as pool:
            try:
                pending: deque[Iterable[Any]] = deque()
                for window in _windows(works, limit):
                    share = chunk or max(1, min(32, len(window) // (4 * workers)))
                    pending.append(pool.imap(functools.partial(_run_job, job), window, share))
                    if len(pending) > 1:  # keep the next window working while it drains
                        yield from pending.popleft()
                while pending:
                    yield from pending.popleft()
            finally:  # done, failed or interrupted: the pool's terminate() ends its workers
                stopping.value = 1
                watch = _watch_stop(pool)
    finally:
        if watch is not None:
            watch.set()


_WATCH_S = 0.5  # between SIGTERMs to the workers a stopped pool still has
_KILL_AFTER_S = 10.0  # then SIGKILL


def _watch_stop(pool: Any) -> threading.Event:
    """While the pool is stopped (Pool.terminate() joins its workers), SIGTERM the workers
    still alive every _WATCH_S (terminate()'s one signal can come before the worker acts on
    it), SIGKILL after _KILL_AFTER_S; set the event returned once the pool is stopped.
    A worker is looked at by its sentinel (readable once it exits), never by its pid alone:
    a worker the pool reaped already is not signalled."""
    done = threading.Event()

    def watch() -> None:
        waited = 0.0
        while not done.wait(_WATCH_S):
            waited += _WATCH_S
            for process in list(pool._pool):  # Pool keeps no public list of its workers
                if not multiprocessing.connection.wait([process.sentinel], 0):
                    with contextlib.suppress(OSError, ValueError):
                        os.kill(process.pid, signal.SIGKILL if waited >= _KILL_AFTER_S
                                else signal.SIGTERM)

    threading.Thread(target=watch, name="fastloader-pool-stop", daemon=True).start()
    return done


def _prepared(items: ItemSource, plan: Spans, todo: Sequence[int], workers: int
              ) -> Generator[Any, None, None]:
    """The pending shards' items prepared in plan order: here when one process (or a few
    items) would do, else on a pool."""
    positions = (i for k in todo for i in range(*plan.span(k)))
    count = sum(plan.span(k)[1] - plan.span(k)[0] for k in todo)
    if workers == 1 or count < 4 * workers:
        yield from (items.prepare(i) for i in positions)
        return
    locality = items.locality()
    with items.inherited() as fork:
        if locality is None:
            works = ((items.work(i), items.size(i)) for i in positions)
            yield from _pooled(items.job(), works, workers, fork, items.window)
            return
        runs = _runs(items, positions, locality)
        job = functools.partial(_run_each, items.job())
        for prepared in _pooled(job, runs, workers, fork, max(1, items.window // _RUN_ITEMS), 1):
            yield from prepared


def _runs(items: ItemSource, positions: Iterable[int], locality: Callable[[int], Any]
          ) -> Iterator[tuple[list[Any], int]]:
    """Consecutive positions of one locality as runs of works (at most _RUN_ITEMS items and
    about _RUN_BYTES), each with its size hint."""
    run: list[Any] = []
    size, key = 0, None
    for i in positions:
        here = locality(i)
        if run and (here != key or len(run) >= _RUN_ITEMS or size >= _RUN_BYTES):
            yield run, size
            run, size = [], 0
        run.append(items.work(i))
        size += items.size(i)
        key = here
    if run:
        yield run, size


def _write_parts(plan: Spans, todo: Sequence[int], stream: Iterator[Any],
                 build: Callable[[int, Iterator[Any]], Any], meter: Meter) -> set[int]:
    """build(k, items) for each shard of todo, its items taken from stream (every pending
    item prepared in plan order) and counted as they go; the shards written."""
    def counted(lo: int, hi: int) -> Iterator[Any]:
        for i in range(lo, hi):
            item = next(stream)
            note_warnings(item, i, plan.relpath)
            yield item
            meter.add(1, int(plan.sizes[i]))

    written: set[int] = set()
    try:
        for k in todo:
            build(k, counted(*plan.span(k)))
            written.add(k)
    finally:  # now, not when collected: the pool ends and the inherited source is let go
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return written


def note_warnings(item: Any, i: int, name: Callable[[int], str]) -> None:
    """Log what the decoders warned about a packed item (validate.Prepared.warnings: Pillow's,
    libtiff's ...), one message per item on validate's WARNED_LOG, named by its path or
    name(i); a refused item carries them in its reason (skipped.json) instead."""
    record = getattr(item, "record", item)  # an importer's or Python sample's, or a file's
    said = getattr(record, "warnings", ())
    if said and record.data is not None:
        WARNED_LOG.warning("%s: %s", getattr(item, "path", None) or name(i), "; ".join(said))


def run_local(staging: Stage, plan: Spans, todo: Sequence[int], items: ItemSource,
              settings: TaskSettings, workers: int, meter: Meter) -> set[int]:
    """Write the parts of `todo` (any source's items) with this machine's processes; the
    shards written."""
    stream = _prepared(items, plan, todo, workers)
    return _write_parts(plan, todo, stream, lambda k, prepared: build_part(
        staging, plan, k, settings, items, prepared), meter)


def run_stream(staging: Stage, plan: Spans, items: ItemSource, samples: Iterable[Any],
               settings: TaskSettings, workers: int, shard_samples: int, meter: Meter) -> None:
    """A plain iterable of samples read in order here, each handed to the items' job as its
    work (where, sample), a part every shard_samples samples; the plan's bounds and sizes
    are set to what was read (known only now)."""
    works = ((f"sample {k}", s) for k, s in enumerate(samples))
    if workers == 1:
        job = items.job()
        stream: Iterator[Any] = map(job, works)
    else:
        stream = _pooled(items.job(), ((w, 0) for w in works), workers, False, items.window)
    n = 0
    try:
        while chunk := list(itertools.islice(stream, shard_samples)):
            for k, item in enumerate(chunk):
                note_warnings(item, n + k, "sample {}".format)
            plan.bounds = count_bounds(n + len(chunk), shard_samples)
            plan.sizes = np.zeros(n + len(chunk), np.int64)
            build_part(staging, plan, n // shard_samples, settings, items, chunk)
            n += len(chunk)
            meter.add(len(chunk), 0)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def pending_shards(staging: Path, plan: Spans, resume: bool, made_of: Identity
                   ) -> list[int]:
    """The shards whose part is missing, invalid or made from other items (part.identity;
    all of them unless resuming)."""
    if not resume:
        return list(range(plan.num_shards))
    from fastloader.pack.staging.part import check_part

    return [k for k in range(plan.num_shards)
            if check_part(staging, plan, k, made_of)[0] is None]


def read_keys(items: ItemSource, plan: Spans, shards: Sequence[int], workers: int
              ) -> dict[int, bytes]:
    """The keys of these shards' items (shard -> items.keys) where telling them means reading
    the items (items.key_job(): Python samples), read by forked workers as their preparing
    would be, so a resume's check reads with every core; {} where the source tells its keys
    from its plan (or one process, or few items, would do: the check reads them then)."""
    job = items.key_job()
    count = sum(plan.span(k)[1] - plan.span(k)[0] for k in shards)
    if job is None or workers == 1 or count < 4 * workers:
        return {}
    with items.inherited() as fork:
        if not fork:  # each sample would travel pickled: reading it here is cheaper
            return {}
        works = ((items.work(i), 0) for k in shards for i in range(*plan.span(k)))
        keys = list(_pooled(job, works, workers, True, items.window))
    found, at = {}, 0
    for k in shards:
        lo, hi = plan.span(k)
        found[k] = b"".join(keys[at:at + hi - lo])
        at += hi - lo
    return found
