"""The local engine: this machine's processes run a plan's pending shard tasks.

The items of every pending shard are prepared in plan order on a process pool (so even one
shard uses every core), and each part is written here when its last item is in (the same
part a Ray task writes, pack/staging/build.py). An ImageFolder tree's files go to the pool by
path; a field source's samples are read by index in forked workers (its __getitem__ runs
there, in parallel). A plain iterable of samples is read in order here and cut every
shard_samples samples, each chunk a part.
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.format.fields import FieldSpec
from fastloader.pack.engines.progress import Meter
from fastloader.pack.sources.validate import Prepared
from fastloader.pack.sources.values import PreparedSample
from fastloader.pack.staging.build import (
    build_part,
    build_sample_part,
    prepare_item,
    prepare_job,
)
from fastloader.pack.staging.part import Stage
from fastloader.pack.staging.plan import (
    SamplePlan,
    ShardPlan,
    Spans,
    TaskSettings,
    count_bounds,
)

_WINDOW_BYTES = 64 << 20  # source bytes in flight per pool window: bounds memory
_WINDOW_FILES = 2048
_WINDOW = 1024  # samples in flight per pool window: bounds memory
_SOURCE: Any = None  # the sequence being packed, inherited by forked workers


def default_sigterm() -> None:
    """A pool worker's initializer: SIGTERM kills it again. A forked worker inherits its
    parent's Python handler (ray.init installs one and leaves it after shutdown), and Pool's
    terminate() would then run that handler, not end the worker, and wait on it forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _windows(plan: ShardPlan, positions: Iterable[int]) -> Iterator[list[int]]:
    window: list[int] = []
    size = 0
    for i in positions:
        window.append(i)
        size += int(plan.sizes[i])
        if size >= _WINDOW_BYTES or len(window) >= _WINDOW_FILES:
            yield window
            window, size = [], 0
    if window:
        yield window


def _prepared_files(plan: ShardPlan, todo: Sequence[int], workers: int,
              job: Callable[[str], Prepared]) -> Iterator[Prepared]:
    """The pending shards' files prepared in listing order, by a pool holding two windows."""
    positions = (i for k in todo for i in range(*plan.span(k)))
    count = sum(plan.span(k)[1] - plan.span(k)[0] for k in todo)
    if workers == 1 or count < 4 * workers:
        yield from (job(plan.source(i)) for i in positions)
        return
    import multiprocessing

    with multiprocessing.Pool(workers, initializer=default_sigterm) as pool:
        pending: deque[Iterable[Prepared]] = deque()
        for window in _windows(plan, positions):
            chunk = max(1, min(32, len(window) // (4 * workers)))
            paths = [plan.source(i) for i in window]
            pending.append(pool.imap(job, paths, chunk))
            if len(pending) > 1:  # keep the next window decoding while this one drains
                yield from pending.popleft()
        while pending:
            yield from pending.popleft()


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
    finally:  # now, not when collected: a later pack's _SOURCE must not be reset by this one
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return written


def run_local(staging: Stage, plan: ShardPlan, todo: Sequence[int], settings: TaskSettings,
              workers: int, meter: Meter) -> set[int]:
    """Write the parts of `todo` (a tree's) with this machine's processes; the shards
    written."""
    stream = _prepared_files(plan, todo, workers, prepare_job(settings))
    return _write_parts(plan, todo, stream,
                        lambda k, items: build_part(staging, plan, k, settings, items), meter)


def is_sequence(samples: Any) -> bool:
    """Whether samples can be read by index (len + getitem), not a plain iterable."""
    return hasattr(samples, "__len__") and hasattr(samples, "__getitem__") and not isinstance(
        samples, (dict, str, bytes))


def _job(item: Any, specs: Sequence[FieldSpec], settings: TaskSettings) -> PreparedSample:
    if isinstance(item, int):  # an index into the forked sequence: __getitem__ runs here
        where = f"sample {item}"
        try:
            sample = _SOURCE[item]
        except Exception as exc:  # the user's __getitem__: any failure is this sample's
            return prepare_item(f"<{type(exc).__name__}: {exc}>", specs, where, settings)
        return prepare_item(sample, specs, where, settings)
    where, sample = item
    return prepare_item(sample, specs, where, settings)


def _prepared_samples(samples: Any, items: Iterable[Any], specs: Sequence[FieldSpec],
              settings: TaskSettings) -> Generator[PreparedSample, None, None]:
    """items (indices of a sequence, or (where, sample) pairs) prepared in order, by a pool
    holding at most two windows."""
    global _SOURCE
    job: Callable[[Any], PreparedSample] = functools.partial(_job, specs=specs,
                                                             settings=settings)
    # fork, explicitly (whatever the global default): workers inherit the sequence and call
    # its __getitem__; without fork, samples travel to the workers pickled, in order.
    forked = is_sequence(samples) and "fork" in multiprocessing.get_all_start_methods()
    _SOURCE = samples
    try:
        if settings.workers == 1:
            yield from map(job, items)
            return
        if not forked and is_sequence(samples):
            items = ((f"sample {i}", samples[i]) for i in items)
        with multiprocessing.get_context("fork" if forked else None).Pool(
                settings.workers, initializer=default_sigterm) as pool:
            iterator = iter(items)
            pending: list[Iterable[PreparedSample]] = []
            while window := list(itertools.islice(iterator, _WINDOW)):
                chunk = max(1, min(32, len(window) // (4 * settings.workers)))
                pending.append(pool.imap(job, window, chunk))
                if len(pending) > 1:  # keep the next window working while this one drains
                    yield from pending.pop(0)
            for rest in pending:
                yield from rest
    finally:
        _SOURCE = None


def run_local_samples(staging: Stage, plan: SamplePlan, todo: Sequence[int], samples: Any,
                      specs: Sequence[FieldSpec], settings: TaskSettings,
                      meter: Meter) -> set[int]:
    """Write the parts of `todo` (a field source's) with this machine's processes; the
    shards written."""
    positions = (i for k in todo for i in range(*plan.span(k)))
    stream = _prepared_samples(samples, positions, specs, settings)
    return _write_parts(plan, todo, stream, lambda k, items: build_sample_part(
        staging, plan, k, specs, settings, items), meter)


def run_stream(staging: Stage, plan: SamplePlan, samples: Iterable[Any],
               specs: Sequence[FieldSpec], settings: TaskSettings, shard_samples: int,
               meter: Meter) -> SamplePlan:
    """A plain iterable read in order here, a part every shard_samples samples; the plan of
    what was read (its bounds known only now)."""
    items = ((f"sample {k}", s) for k, s in enumerate(samples))
    stream = _prepared_samples(samples, items, specs, settings)
    n = 0
    try:
        while chunk := list(itertools.islice(stream, shard_samples)):
            plan.bounds = count_bounds(n + len(chunk), shard_samples)
            plan.sizes = np.zeros(n + len(chunk), np.int64)
            build_sample_part(staging, plan, n // shard_samples, specs, settings, chunk)
            n += len(chunk)
            meter.add(len(chunk), 0)
    finally:
        stream.close()
    return plan


def pending_shards(staging: Path, plan: Spans, resume: bool) -> list[int]:
    """The shards whose part is missing or invalid (all of them unless resuming)."""
    if not resume:
        return list(range(plan.num_shards))
    from fastloader.pack.staging.part import check_part

    return [k for k in range(plan.num_shards) if check_part(staging, plan, k)[0] is None]
