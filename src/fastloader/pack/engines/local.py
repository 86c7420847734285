"""The local engine: this machine's processes run a plan's pending shard tasks, for any source.

The items of every pending shard are prepared in plan order on a process pool (so even one
shard uses every core), and each part is written here when its last item is in (the same
part a Ray task writes, pack/staging/build.py). What travels to a worker is the source's
work for an item (pack/sources/base.ItemSource: a tree's file path, an index into a sequence
the forked workers inherit, or a sample); windows of items bound what is in flight. A plain
iterable of samples is read in order here and cut every shard_samples samples, each chunk a
part.
"""

from __future__ import annotations

import itertools
import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.pack.engines.progress import Meter
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.staging.build import build_part
from fastloader.pack.staging.part import Identity, Stage
from fastloader.pack.staging.plan import Spans, TaskSettings, count_bounds

_WINDOW_BYTES = 64 << 20  # source bytes in flight per pool window: bounds memory


def default_sigterm() -> None:
    """A pool worker's initializer: SIGTERM kills it again. A forked worker inherits its
    parent's Python handler (ray.init installs one and leaves it after shutdown), and Pool's
    terminate() would then run that handler, not end the worker, and wait on it forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
            fork: bool, limit: int) -> Iterator[Any]:
    """job over the works in order, by a pool holding at most two windows."""
    with multiprocessing.get_context("fork" if fork else None).Pool(
            workers, initializer=default_sigterm) as pool:
        pending: deque[Iterable[Any]] = deque()
        for window in _windows(works, limit):
            chunk = max(1, min(32, len(window) // (4 * workers)))
            pending.append(pool.imap(job, window, chunk))
            if len(pending) > 1:  # keep the next window working while this one drains
                yield from pending.popleft()
        while pending:
            yield from pending.popleft()


def _prepared(items: ItemSource, plan: Spans, todo: Sequence[int], workers: int
              ) -> Generator[Any, None, None]:
    """The pending shards' items prepared in plan order: here when one process (or a few
    items) would do, else on a pool."""
    positions = (i for k in todo for i in range(*plan.span(k)))
    count = sum(plan.span(k)[1] - plan.span(k)[0] for k in todo)
    if workers == 1 or count < 4 * workers:
        yield from (items.prepare(i) for i in positions)
        return
    with items.inherited() as fork:
        works = ((items.work(i), items.size(i)) for i in positions)
        yield from _pooled(items.job(), works, workers, fork, items.window)


def _write_parts(plan: Spans, todo: Sequence[int], stream: Iterator[Any],
                 build: Callable[[int, Iterator[Any]], Any], meter: Meter) -> set[int]:
    """build(k, items) for each shard of todo, its items taken from stream (every pending
    item prepared in plan order) and counted as they go; the shards written."""
    def counted(lo: int, hi: int) -> Iterator[Any]:
        for i in range(lo, hi):
            yield next(stream)
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
