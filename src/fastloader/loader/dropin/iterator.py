"""One pass of the drop-in loader: an iterator object over DataLoader's iterator, started at
iter(), carrying on after a batch that raised (as DataLoader's does), timed without a finaliser."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from fastloader.loader.pipeline.stats import Counters, batch_size_of


def to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """Move every tensor inside a (nested) batch to device; other values pass through."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        moved = {k: to_device(v, device, non_blocking) for k, v in batch.items()}
        return moved if type(batch) is dict else type(batch)(moved)  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


class DropInIterator:
    """The batches of one pass: DataLoader's iterator (started here, at iter(loader), so its
    workers start and its warnings come where DataLoader's do), each batch moved to `device`
    and counted.

    An exception from a batch propagates and the pass goes on: the next next() gives the next
    batch, as DataLoader's iterator does. There is no finaliser: the pass's active time is
    added at each next(), so an unfinished iterator has nothing to do at interpreter exit.
    """

    def __init__(self, owner: object, loader: Iterable[Any], counters: Counters,
                 device: torch.device | None, non_blocking: bool) -> None:
        # The drop-in loader lives as long as its pass: collected, it would close the workers
        # of `iter(FastLoader(...))` under the pass.
        self._owner = owner
        self._mark = time.perf_counter()  # the start-up counts in the pass's active time
        self._batches: Iterator[Any] = iter(loader)
        self._counters = counters
        self._device = device
        self._non_blocking = non_blocking
        self._finished = False

    def __iter__(self) -> DropInIterator:
        return self

    def __len__(self) -> int:
        return len(self._batches)  # type: ignore[arg-type]  # DataLoader's iterator's len

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        wait_start = time.perf_counter()
        try:
            batch = next(self._batches)
        except StopIteration:
            self._finished = True
            raise
        finally:
            self._lap(wait_start)
        if self._device is not None:
            copy_start = time.perf_counter()
            batch = to_device(batch, self._device, self._non_blocking)
            self._counters.add_time("copy", time.perf_counter() - copy_start)
        self._counters.add_batch(batch_size_of(batch))
        return batch

    def _lap(self, wait_start: float) -> None:
        """Count the wait for this batch, and the pass's time since the last next()."""
        now = time.perf_counter()
        self._counters.add_time("wait", now - wait_start)
        self._counters.add_time("active", now - self._mark)
        self._mark = now
