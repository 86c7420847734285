"""The drop-in path: any dataset torch's DataLoader takes (map-style: anything with __getitem__
and __len__, a Hugging Face datasets.Dataset too; iterable: a torch or datasets IterableDataset)
through DataLoader with better defaults."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from fastloader.errors import FastloaderError
from fastloader.loader.dropin.arguments import (
    FIXED_ATTRIBUTES,
    drop_none_samplers,
    given_arguments,
    is_datapipe,
    iterable_shuffle,
    refuse_assignment,
    refuse_contradictions,
)
from fastloader.loader.dropin.iterator import DropInIterator
from fastloader.loader.dropin.sending import SendGuard, users_collate_fn
from fastloader.loader.factory.arguments import options_from
from fastloader.loader.factory.base import FastLoader
from fastloader.loader.factory.options import DropInOptions
from fastloader.loader.order.sampler import planned_world, resolve_rank_world, threads_per_rank
from fastloader.loader.pipeline.stats import Counters, LoaderStats

DEFAULT_PREFETCH_FACTOR = 4  # torch's 2 leaves workers idle behind a slow step more often
log = logging.getLogger(__name__)


def is_hf_iterable(data: object) -> bool:
    """Whether data is a Hugging Face datasets.IterableDataset (datasets not imported)."""
    return any(c.__name__ == "IterableDataset" and c.__module__.split(".")[0] == "datasets"
               for c in type(data).__mro__)


def _iterable_workers(data: object, threads: int) -> int:
    """Default workers of an iterable dataset: one per shard of a datasets.IterableDataset
    (each worker reads whole shards; more would idle), none for a torch IterableDataset
    (DataLoader's default: each worker would yield the whole stream unless the dataset
    splits itself by torch.utils.data.get_worker_info())."""
    if is_hf_iterable(data):
        return max(0, min(threads, int(getattr(data, "num_shards", 1) or 1)))
    return 0


class DropInLoader(FastLoader, path="drop-in loader"):
    """torch.utils.data.DataLoader with tuned defaults and a `device=` transfer.

    Built by FastLoader(dataset, ...) for any dataset DataLoader takes: map-style (anything
    with __getitem__ and __len__: a torch Dataset, a datasets.Dataset, a list) or iterable (a
    torch IterableDataset, a datasets.IterableDataset). Defaults that differ from DataLoader:
    num_workers = the cores this rank may use, persistent_workers=True when there are
    workers, prefetch_factor=4, pin_memory when the target is CUDA, a DistributedSampler
    (seeded by `seed`) under torch.distributed, and a seeded shuffle generator. Every
    DataLoader keyword is accepted and wins over a default; FastLoader's packed-only
    arguments (transforms, normalize, ...) are refused with the way to get them.

    Otherwise it keeps DataLoader's contract: the arguments and assignments DataLoader refuses
    are refused (arguments.py); iter() starts the pass and a batch that raised does not end
    it (iterator.py); a worker's batch that cannot be pickled is an error, not a hang
    (sending.py). docs/loading.md lists where it differs, and why.

    An iterable dataset yields in its own order (shuffle=True is refused, as DataLoader refuses
    it: shuffle it itself, e.g. datasets' dataset.shuffle(seed=..., buffer_size=...)); a
    datapipe is shuffled as DataLoader shuffles it, seeded by `seed`. A datasets.IterableDataset
    gets a worker per shard (up to the cores) and, under torch.distributed, its rank's part
    (datasets.distributed.split_dataset_by_node); set_epoch reaches its own set_epoch. A
    torch IterableDataset gets DataLoader's defaults (no workers, every rank reading the
    whole stream) unless it is given num_workers: it must split itself by worker and rank.
    """

    def __init__(self, data: Any, *args: object, **kwargs: object) -> None:
        # FastLoader's options of the packed paths: taken at their defaults, refused otherwise;
        # what is left is DataLoader's.
        given = given_arguments(args, kwargs)
        options, dataloader_kwargs = options_from(DropInOptions, "drop-in loader", args, kwargs)
        drop_none_samplers(dataloader_kwargs)
        shuffle: bool | None = options.shuffle
        if isinstance(data, IterableDataset):
            shuffle = iterable_shuffle(data, options.shuffle, given)
        refuse_contradictions(options.batch_size, options.shuffle, options.drop_last,
                              dataloader_kwargs)
        self.device = options.target
        rank, world = options.rank_world
        self.seed = options.seed
        # Without an explicit rank or sampler, shard by torch.distributed as it is when a pass
        # starts: a loader built before init_process_group must not have every rank read all.
        self._follow_distributed = (options.world_size is None
                                    and "sampler" not in dataloader_kwargs
                                    and "batch_sampler" not in dataloader_kwargs)
        self._args = (data, options.batch_size, shuffle, options.drop_last, dataloader_kwargs)
        self._built_for = (rank, world)
        self._counters = Counters()
        self._build(rank, world)
        self._built()

    def _build(self, rank: int, world: int) -> None:
        """The DataLoader for this rank and world (a DistributedSampler when world > 1)."""
        dataset, batch_size, shuffle, drop_last, kwargs = self._args
        kwargs = dict(kwargs)
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            dataset = self._iterable_part(dataset, rank, world)
        elif world > 1 and "sampler" not in kwargs and "batch_sampler" not in kwargs:
            kwargs["sampler"] = DistributedSampler(dataset, num_replicas=world, rank=rank,
                                                   shuffle=bool(shuffle), seed=self.seed,
                                                   drop_last=drop_last)
            shuffle = False
        self._generator: torch.Generator | None = None
        # seeded: a shuffle's order, and a datapipe's Shuffler (DataLoader seeds it from here)
        if ((shuffle or is_datapipe(dataset)) and "generator" not in kwargs
                and "sampler" not in kwargs):
            self._generator = torch.Generator().manual_seed(self.seed)
            kwargs["generator"] = self._generator
        self._worker_defaults(dataset, kwargs, iterable, world)
        if "batch_sampler" in kwargs:  # DataLoader forbids these next to a batch_sampler
            loader = DataLoader(dataset, **kwargs)
        else:
            loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                                drop_last=drop_last, **kwargs)
        if loader.num_workers > 0:  # a batch that cannot be pickled: an error, not a hang
            loader.collate_fn = SendGuard(loader.collate_fn)
        self.loader = loader
        self._non_blocking = bool(loader.pin_memory)
        self._built_for = (rank, world)

    def _worker_defaults(self, dataset: Any, kwargs: dict[str, Any], iterable: bool,
                         world: int) -> None:
        """The drop-in's defaults of DataLoader's worker arguments, where not given."""
        threads = threads_per_rank(
            world if world > 1 or not self._follow_distributed else planned_world(None, None))
        workers = kwargs.setdefault("num_workers", _iterable_workers(dataset, threads)
                                    if iterable else threads)
        if workers > 0:
            kwargs.setdefault("persistent_workers", True)
            kwargs.setdefault("prefetch_factor", DEFAULT_PREFETCH_FACTOR)
        on_cuda = self.device is not None and self.device.type == "cuda"
        kwargs.setdefault("pin_memory", on_cuda)

    def _iterable_part(self, dataset: Any, rank: int, world: int) -> Any:
        """This rank's part of an iterable dataset: a datasets.IterableDataset split by node;
        a torch IterableDataset as it is (it splits itself, as under DataLoader)."""
        if world <= 1:
            return dataset
        if is_hf_iterable(dataset):
            from datasets.distributed import (  # type: ignore[import-untyped, unused-ignore]
                split_dataset_by_node,
            )

            return split_dataset_by_node(dataset, rank=rank, world_size=world)
        log.warning("drop-in loader: %s is a torch IterableDataset on %d ranks; every rank "
                    "reads what it yields unless it splits itself by rank",
                    type(dataset).__name__, world)
        return dataset

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
            value = getattr(self._follow(), name)
            return users_collate_fn(value) if name == "collate_fn" else value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        # DataLoader refuses these once built; setting them here would change nothing either
        if name in FIXED_ATTRIBUTES and "loader" in self.__dict__:
            raise refuse_assignment(name, value)
        super().__setattr__(name, value)

    def __len__(self) -> int:
        return len(self._follow())

    _epoch: int | None = None  # the last set_epoch(), kept across a rebuild

    def set_epoch(self, epoch: int) -> None:
        """Forward to a sampler with set_epoch; else reseed the shuffle with (seed + epoch)."""
        self._epoch = epoch
        holders: tuple[Any, ...] = (self.loader.sampler, self.loader.batch_sampler)
        if isinstance(self.loader.dataset, IterableDataset):  # it orders itself
            holders = (self.loader.dataset,)
        for holder in holders:
            if hasattr(holder, "set_epoch"):
                holder.set_epoch(epoch)
                return
        if self._generator is not None:
            self._generator.manual_seed(self.seed + epoch)

    def __iter__(self) -> DropInIterator:
        """A pass, started now (workers, DataLoader's warnings), as iter(DataLoader) starts."""
        loader = self._follow()
        return DropInIterator(self, loader, self._counters, self.device, self._non_blocking)

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
