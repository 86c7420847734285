"""`PackedAttributes`: the torch DataLoader attributes of the packed paths' loaders, as a mixin."""

from __future__ import annotations

from typing import Any


class PackedAttributes:
    """The DataLoader attributes training frameworks read, with what is true of a packed loader.

    Lightning reads `batch_sampler` (then `.sampler`) to decide whether a loader shuffles and to
    call set_epoch; Accelerate and others read the DataLoader keyword attributes. A packed
    loader batches itself (no batch sampler: None, as DataLoader(batch_size=None) has) and
    decodes on threads rather than worker processes (num_workers=0). Its `dataset` and
    `collate_fn` (set by each loader: fastloader.loader.factory.pass_dataset) are its passes as
    samples and the function that turns a batch's samples back into that batch, so a DataLoader
    built from these attributes yields the loader's batches.
    """

    batch_sampler: Any = None
    num_workers = 0
    prefetch_factor: Any = None  # DataLoader's value without worker processes
    persistent_workers = False
    generator: Any = None  # order and crops come from `seed`, not from a torch Generator
    timeout = 0
    worker_init_fn: Any = None
    multiprocessing_context: Any = None
    # DataLoader's pin_memory says its batches come out in pinned host memory. A packed loader's
    # never do: on CUDA they come out on the device (the ring it copies from is pinned), on the
    # CPU in pageable tensors. True would also make a DataLoader rebuilt from these attributes
    # (Accelerate's skip_first_batches) try to pin CUDA tensors, which torch refuses.
    pin_memory = False
    pin_memory_device = ""
    in_order = True
