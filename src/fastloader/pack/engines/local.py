"""The local engine: this machine's processes run a plan's pending shard tasks, for any source.

The items of every pending shard are prepared in plan order on a process pool (so even one
shard uses every core), and each part is written here when its last item is in (the same
part a Ray task writes, pack/staging/build.py). What travels to a worker is the source's
work for an item (pack/sources/base.ItemSource: an index into a sequence the forked workers
inherit, or a sample); windows of items bound what is in flight. A plain
iterable of samples is read in order here and cut every shard_samples samples, each chunk a
part. Items the source groups by locality (a Parquet row group's cells) travel as runs, each
prepared by one worker, so no group is decoded by two.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from fastloader.pack.engines.pool import open_pool, run_job, stop_pool
from fastloader.pack.engines.progress import Meter
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.sources.validate import WARNED_LOG
from fastloader.pack.staging.build import build_part
from fastloader.pack.staging.part import Identity, Stage
from fastloader.pack.staging.plan import Spans, TaskSettings, count_bounds

_WINDOW_BYTES = 64 << 20  # source bytes in flight per pool window: bounds memory
_RUN_ITEMS = 256  # at most this many items of one locality travel as one run
_RUN_BYTES = 16 << 20  # and about this many of their bytes (a run's results come back whole)

W = TypeVar("W")  # what travels to a worker for an item (ItemSource.work)
R = TypeVar("R")  # what its job returns (a prepared item)


def _run_each(job: Callable[[W], R], works: list[W]) -> list[R]:
    """job over a run of works in one worker, in order."""
    return [job(work) for work in works]


def _windows(works: Iterable[tuple[W, int]], limit: int) -> Iterator[list[W]]:
    """The works in windows of at most `limit` items and about _WINDOW_BYTES of sizes."""
    window: list[W] = []
    size = 0
    for work, weight in works:
        window.append(work)
        size += weight
        if size >= _WINDOW_BYTES or len(window) >= limit:
            yield window
            window, size = [], 0
    if window:
        yield window


def _pooled(job: Callable[[W], R], works: Iterable[tuple[W, int]], workers: int,
            fork: bool, limit: int, chunk: int | None = None) -> Iterator[R]:
    """job over the works in order, by a pool holding at most two windows; each worker
    takes `chunk` works at a time (default: a share of the window). Done, failed or
    interrupted, the pool is stopped within a bound (pool.stop_pool)."""
    pool, stopping = open_pool(workers, fork)
    try:
        pending: deque[Iterable[R]] = deque()
        for window in _windows(works, limit):
            share = chunk or max(1, min(32, len(window) // (4 * workers)))
            pending.append(pool.imap(functools.partial(run_job, job), window, share))
            if len(pending) > 1:  # keep the next window working while it drains
                yield from pending.popleft()
        while pending:
            yield from pending.popleft()
    finally:
        stop_pool(pool, stopping)


def _prepared(items: ItemSource, plan: Spans, todo: Sequence[int], workers: int
              ) -> Generator[object, None, None]:
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


def _runs(items: ItemSource, positions: Iterable[int], locality: Callable[[int], Hashable]
          ) -> Iterator[tuple[list[object], int]]:
    """Consecutive positions of one locality as runs of works (at most _RUN_ITEMS items and
    about _RUN_BYTES), each with its size hint."""
    run: list[object] = []
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


def _write_parts(plan: Spans, todo: Sequence[int], stream: Iterator[object],
                 build: Callable[[int, Iterator[object]], object], meter: Meter) -> set[int]:
    """build(k, items) for each shard of todo, its items taken from stream (every pending
    item prepared in plan order) and counted as they go; the shards written."""
    def counted(lo: int, hi: int) -> Iterator[object]:
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


def note_warnings(item: object, i: int, name: Callable[[int], str]) -> None:
    """Log what the decoders warned about a packed item (validate.Prepared.warnings: Pillow's,
    libtiff's ...), one message per item on validate's WARNED_LOG, named by its path or
    name(i); a refused item carries them in its reason (skipped.json) instead."""
    if type(item) is tuple:  # a keyed sample (staging/items.Keyed): the sample
        item = item[0]
    record = getattr(item, "record", item)  # an importer's or Python sample's, or a file's
    said = getattr(record, "warnings", ())
    if said and getattr(record, "data", None) is not None:  # only a Prepared has warnings
        WARNED_LOG.warning("%s: %s", getattr(item, "path", None) or name(i), "; ".join(said))


def run_local(staging: Stage, plan: Spans, todo: Sequence[int], items: ItemSource,
              settings: TaskSettings, workers: int, meter: Meter) -> set[int]:
    """Write the parts of `todo` (any source's items) with this machine's processes; the
    shards written."""
    stream = _prepared(items, plan, todo, workers)
    return _write_parts(plan, todo, stream, lambda k, prepared: build_part(
        staging, plan, k, settings, items, prepared), meter)


def run_stream(staging: Stage, plan: Spans, items: ItemSource, samples: Iterable[object],
               settings: TaskSettings, workers: int, shard_samples: int, meter: Meter) -> None:
    """A plain iterable of samples read in order here, each handed to the items' job as its
    work (where, sample), a part every shard_samples samples; the plan's bounds and sizes
    are set to what was read (known only now)."""
    works = ((f"sample {k}", s) for k, s in enumerate(samples))
    if workers == 1:
        job = items.job()
        stream: Iterator[object] = map(job, works)
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
