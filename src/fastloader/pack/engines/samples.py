"""Who runs a sample pack's shard tasks: this machine's forked processes, or Ray.

Local: a sequence's pending samples are read by index in forked pool workers (its
__getitem__ runs there, in parallel) and prepared in order; each part is written when its last
sample is in (as engines.run_local does for ImageFolder trees). A plain iterable is read in
order here and cut every shard_samples samples, each chunk a part. Ray: one task per shard
(engines.run_ray with sample_part.run_sample_shard): an importer's source is reopened in the
task from the plan, Python samples go to the tasks by ray.put (they must pickle).
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import pickle
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec
from fastloader.pack.engines.local import Meter, default_sigterm, joined_ray, run_ray
from fastloader.pack.sources.values import PreparedSample, prepare_sample
from fastloader.pack.staging.part import Stage
from fastloader.pack.staging.sample_part import build_sample_part, run_sample_shard
from fastloader.pack.staging.sample_plan import SamplePlan, count_bounds

_WINDOW = 1024  # samples in flight per pool window: bounds memory
_SOURCE: Any = None  # the sequence being packed, inherited by forked workers


def is_sequence(samples: Any) -> bool:
    """Whether samples can be read by index (len + getitem), not a plain iterable."""
    return hasattr(samples, "__len__") and hasattr(samples, "__getitem__") and not isinstance(
        samples, (dict, str, bytes))


def _job(item: Any, specs: Sequence[FieldSpec], settings: dict[str, Any]) -> PreparedSample:
    if isinstance(item, int):  # an index into the forked sequence: __getitem__ runs here
        where = f"sample {item}"
        try:
            sample = _SOURCE[item]
        except Exception as exc:  # the user's __getitem__: any failure is this sample's
            return prepare_sample(f"<{type(exc).__name__}: {exc}>", specs, where, settings)
        return prepare_sample(sample, specs, where, settings)
    where, sample = item
    return prepare_sample(sample, specs, where, settings)


def _prepared(samples: Any, items: Iterable[Any], specs: Sequence[FieldSpec],
              settings: dict[str, Any]) -> Generator[PreparedSample, None, None]:
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
        if settings["workers"] == 1:
            yield from map(job, items)
            return
        if not forked and is_sequence(samples):
            items = ((f"sample {i}", samples[i]) for i in items)
        with multiprocessing.get_context("fork" if forked else None).Pool(
                settings["workers"], initializer=default_sigterm) as pool:
            iterator = iter(items)
            pending: list[Iterable[PreparedSample]] = []
            while window := list(itertools.islice(iterator, _WINDOW)):
                chunk = max(1, min(32, len(window) // (4 * settings["workers"])))
                pending.append(pool.imap(job, window, chunk))
                if len(pending) > 1:  # keep the next window working while this one drains
                    yield from pending.pop(0)
            for rest in pending:
                yield from rest
    finally:
        _SOURCE = None


def run_local(staging: Stage, plan: SamplePlan, todo: Sequence[int], samples: Any,
              specs: Sequence[FieldSpec], settings: dict[str, Any], meter: Meter) -> set[int]:
    """Write the parts of `todo` with this machine's processes; the shards written."""
    positions = (i for k in todo for i in range(*plan.span(k)))
    stream = _prepared(samples, positions, specs, settings)

    def counted(lo: int, hi: int) -> Iterator[PreparedSample]:
        for i in range(lo, hi):
            yield next(stream)
            meter.add(1, int(plan.sizes[i]))

    written: set[int] = set()
    try:
        for k in todo:
            build_sample_part(staging, plan, k, specs, settings, counted(*plan.span(k)))
            written.add(k)
    finally:  # now, not when collected: a later pack's _SOURCE must not be reset by this one
        stream.close()
    return written


def run_stream(staging: Stage, plan: SamplePlan, samples: Iterable[Any],
               specs: Sequence[FieldSpec], settings: dict[str, Any], shard_samples: int,
               meter: Meter) -> SamplePlan:
    """A plain iterable read in order here, a part every shard_samples samples; the plan of
    what was read (its bounds known only now)."""
    items = ((f"sample {k}", s) for k, s in enumerate(samples))
    stream = _prepared(samples, items, specs, settings)
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


def run_on_ray(staging: Stage, plan: SamplePlan, todo: Sequence[int], samples: Any,
               workers: int, address: str | None, meter: Meter) -> set[int]:
    """One Ray task per pending shard; Python samples go to the tasks by ray.put."""
    if plan.reopen is not None:  # the tasks reopen the importer's source from the plan
        return run_ray(staging, todo, workers, address, meter, task=run_sample_shard)
    with joined_ray(workers, address) as ray:  # ray.put needs the instance now
        try:
            shared = ray.put(samples)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise PackError(f"engine='ray' sends Python samples to its tasks pickled, and "
                            f"{type(samples).__name__} does not pickle ({exc}); make it "
                            "picklable or pack with engine='local'.") from None
        return run_ray(staging, todo, workers, address, meter, task=run_sample_shard,
                       extra=(shared,))
