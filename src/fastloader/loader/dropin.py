"""The drop-in path: any map-style Dataset through torch's DataLoader with better defaults."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from fastloader.errors import FastloaderError
from fastloader.loader.base import FastLoader
from fastloader.loader.options import DropInOptions, options_of, take_foreign
from fastloader.loader.sampler import planned_world, resolve_rank_world, threads_per_rank
from fastloader.loader.stats import Counters, LoaderStats, batch_size_of

DEFAULT_PREFETCH_FACTOR = 4  # torch's 2 leaves workers idle behind a slow step more often


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


class DropInLoader(FastLoader, path="drop-in loader"):
    """torch.utils.data.DataLoader with tuned defaults and a `device=` transfer.

    Built by FastLoader(torch_dataset, ...). Defaults that differ from DataLoader:
    num_workers = the cores this rank may use, persistent_workers=True when there are
    workers, prefetch_factor=4, pin_memory when the target is CUDA, a DistributedSampler
    (seeded by `seed`) under torch.distributed, and a seeded shuffle generator. Every
    DataLoader keyword is accepted and wins over a default; FastLoader's packed-only
    arguments (transforms, normalize, ...) are refused with the way to get them.
    """

    def __init__(self, data: torch.utils.data.Dataset[Any], batch_size: int | None = 1,
                 shuffle: bool = False, *, seed: int = 0,
                 device: str | torch.device | None = None, drop_last: bool = False,
                 rank: int | None = None, world_size: int | None = None,
                 **dataloader_kwargs: Any) -> None:
        # FastLoader's options of the packed paths: taken at their defaults, refused otherwise.
        take_foreign(dataloader_kwargs, "drop-in loader")
        options = DropInOptions(**options_of(DropInOptions, locals()))
        kwargs = dataloader_kwargs
        self.device = options.target
        rank, world = options.rank_world
        self.seed = seed
        # Without an explicit rank or sampler, shard by torch.distributed as it is when a pass
        # starts: a loader built before init_process_group must not have every rank read all.
        self._follow_distributed = (world_size is None and "sampler" not in kwargs
                                    and "batch_sampler" not in kwargs)
        self._args = (data, batch_size, shuffle, drop_last, dict(kwargs))
        self._built_for = (rank, world)
        self._counters = Counters()
        self._build(rank, world)
        self._built()

    def _build(self, rank: int, world: int) -> None:
        """The DataLoader for this rank and world (a DistributedSampler when world > 1)."""
        dataset, batch_size, shuffle, drop_last, kwargs = self._args
        kwargs = dict(kwargs)
        self._generator: torch.Generator | None = None
        if world > 1 and "sampler" not in kwargs and "batch_sampler" not in kwargs:
            kwargs["sampler"] = DistributedSampler(dataset, num_replicas=world, rank=rank,
                                                   shuffle=shuffle, seed=self.seed,
                                                   drop_last=drop_last)
            shuffle = False
        elif shuffle and "generator" not in kwargs and "sampler" not in kwargs:
            self._generator = torch.Generator().manual_seed(self.seed)
            kwargs["generator"] = self._generator
        workers = kwargs.setdefault("num_workers", threads_per_rank(
            world if world > 1 or not self._follow_distributed else planned_world(None, None)))
        if workers > 0:
            kwargs.setdefault("persistent_workers", True)
            kwargs.setdefault("prefetch_factor", DEFAULT_PREFETCH_FACTOR)
        on_cuda = self.device is not None and self.device.type == "cuda"
        kwargs.setdefault("pin_memory", on_cuda)
        if "batch_sampler" in kwargs:  # DataLoader forbids these next to a batch_sampler
            self.loader = DataLoader(dataset, **kwargs)
        else:
            self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                                     drop_last=drop_last, **kwargs)
        self._non_blocking = bool(self.loader.pin_memory)
        self._built_for = (rank, world)

    def _follow(self) -> DataLoader[Any]:
        """Rebuild the DataLoader when torch.distributed's rank or world changed since."""
        if self._follow_distributed:
            now = resolve_rank_world(None, None)
            if now != self._built_for:
                epoch = self._epoch
                self.close()
                self._build(*now)
                if epoch is not None:
                    self.set_epoch(epoch)
        return self.loader

    # DataLoader's attributes, read by training frameworks (Lightning, Accelerate), forwarded.
    _FORWARDED = ("dataset", "batch_size", "drop_last", "num_workers", "collate_fn",
                  "pin_memory", "prefetch_factor", "persistent_workers", "generator",
                  "timeout", "worker_init_fn", "multiprocessing_context",
                  "pin_memory_device", "in_order", "sampler", "batch_sampler")

    def __getattr__(self, name: str) -> Any:
        if name in DropInLoader._FORWARDED and "loader" in self.__dict__:
            return getattr(self._follow(), name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __len__(self) -> int:
        return len(self._follow())

    _epoch: int | None = None  # the last set_epoch(), kept across a rebuild

    def set_epoch(self, epoch: int) -> None:
        """Forward to a sampler with set_epoch; else reseed the shuffle with (seed + epoch)."""
        self._epoch = epoch
        holders: tuple[Any, ...] = (self.loader.sampler, self.loader.batch_sampler)
        for holder in holders:
            if hasattr(holder, "set_epoch"):
                holder.set_epoch(epoch)
                return
        if self._generator is not None:
            self._generator.manual_seed(self.seed + epoch)

    def __iter__(self) -> Iterator[Any]:
        started = time.perf_counter()
        iterator = iter(self._follow())
        try:
            while True:
                wait_start = time.perf_counter()
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                finally:
                    self._counters.add_time("wait", time.perf_counter() - wait_start)
                if self.device is not None:
                    copy_start = time.perf_counter()
                    batch = to_device(batch, self.device, self._non_blocking)
                    self._counters.add_time("copy", time.perf_counter() - copy_start)
                self._counters.add_batch(batch_size_of(batch))
                yield batch
        finally:
            self._counters.add_time("active", time.perf_counter() - started)

    def state_dict(self) -> dict[str, Any]:
        raise FastloaderError(
            "state_dict() is only available over packed datasets: a DataLoader over an "
            "arbitrary Dataset cannot resume mid-epoch exactly. Pack the images with "
            "`packdata` and pass the packed path to FastLoader to get exact resume.")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state_dict()  # raises the same explanation

    def stats(self) -> LoaderStats:
        """Counters of the drop-in path: throughput, wait for batches, device copy time."""
        workers = self.loader.num_workers
        return self._counters.snapshot(
            queue_depth=0, prefetch=(self.loader.prefetch_factor or 0) * workers,
            ring_slots=0, ring_bytes=0, pinned=bool(self.loader.pin_memory),
            num_threads=workers, backend="dataloader")

    def close(self) -> None:
        """Shut persistent workers down now instead of at garbage collection."""
        loader = getattr(self, "loader", None)  # None when __init__ failed
        if loader is None:
            return
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        loader._iterator = None

    def __repr__(self) -> str:
        return (f"DropInLoader(dataset={type(self.dataset).__name__}, batch_size="
                f"{self.loader.batch_size}, num_workers={self.loader.num_workers}, "
                f"device={self.device})")
