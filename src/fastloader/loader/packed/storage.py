"""The packed loader's remote-dataset options: cache, shard-aware shuffle, shard prefetch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastloader.checks import int_at_least
from fastloader.errors import invalid_argument
from fastloader.format.dataset import PackedDataset
from fastloader.format.remote import is_url
from fastloader.format.remote_dataset import DEFAULT_PREFETCH_SHARDS
from fastloader.loader.factory.options import PackedOptions

DEFAULT_WINDOW = 8  # shards shuffled together on a remote dataset (BENCHMARKS.md: quality)


@dataclass
class RemoteOptions:
    """What PackedLoader passes to open_dataset for a URL, and the shuffle window."""

    window: int | None
    open_options: dict[str, Any] = field(default_factory=dict)

    def layout(self, dataset: PackedDataset) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The sampler's shard layout (starts, counts, window), or None: plain shuffle."""
        if self.window is None:
            return None
        shards = dataset.manifest.shards
        starts = np.asarray([s.start for s in shards], dtype=np.int64)
        counts = np.asarray([s.count for s in shards], dtype=np.int64)
        return starts, counts, self.window


def remote_options(data: object, packed: PackedOptions) -> RemoteOptions:
    """Check the remote options; a URL gets the shard-aware shuffle (window DEFAULT_WINDOW
    unless shuffle_window says), a local dataset only when shuffle_window is given."""
    cache_dir, cache_limit, storage_options = (packed.cache_dir, packed.cache_limit,
                                               packed.storage_options)
    shuffle_window, prefetch_shards, sampler = (packed.shuffle_window, packed.prefetch_shards,
                                                packed.sampler)
    window = None if shuffle_window is None else int_at_least("shuffle_window",
                                                              shuffle_window, 1)
    prefetch = int_at_least("prefetch_shards", prefetch_shards, 0)
    if sampler is not None and window is not None:
        raise invalid_argument("shuffle_window", shuffle_window, "sets the shard-aware "
                               "shuffle, and sampler= sets the order itself",
                               "Drop one of shuffle_window= and sampler=.")
    if not is_url(data):
        given = {"cache_dir": cache_dir, "cache_limit": cache_limit,
                 "storage_options": storage_options,
                 "prefetch_shards": None if prefetch_shards == DEFAULT_PREFETCH_SHARDS
                 else prefetch_shards}
        for name, value in given.items():
            if value is not None:
                raise invalid_argument(name, value, "applies to a dataset at a URL only",
                                       "Drop it, or pass the dataset's s3:// (or other) URL.")
        return RemoteOptions(window)
    if sampler is not None and cache_limit is not None:
        # A sampler's order may touch every shard before any is done with: no window bounds
        # what a reader pins, so a cache limit could stall the pass.
        raise invalid_argument("cache_limit", cache_limit, "cannot bound the cache under "
                               "sampler=, whose order may read from every shard at once",
                               "Drop cache_limit (or sampler=, to get the shard-aware shuffle).")
    if sampler is None and window is None:
        window = DEFAULT_WINDOW
    options = {"cache_dir": cache_dir, "cache_limit": cache_limit,
               "storage_options": storage_options, "prefetch": prefetch,
               "window": window or 1}
    return RemoteOptions(window, options)


def plan_shards(dataset: PackedDataset, indices: np.ndarray, start: int, num_batches: int,
                batch_size: int) -> None:
    """Tell a remote dataset the records this pass reads, in order, so its prefetch follows
    them (a local dataset has no plan_epoch and needs none)."""
    plan = getattr(dataset, "plan_epoch", None)
    if plan is not None:
        plan(indices[start * batch_size: num_batches * batch_size])
