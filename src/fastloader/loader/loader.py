"""FastLoader: the one face of three loaders (packed, drop-in, DALI), picked from the arguments."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fastloader.errors import invalid_argument

BACKENDS = ("auto", "native", "pillow", "dali")


class FastLoader:
    """Iterate (images, labels) batches, like torch.utils.data.DataLoader but faster.

    `FastLoader(...)` returns one of three loaders, each a FastLoader with the same interface
    (iteration, len, set_epoch, state_dict/load_state_dict, stats, close, context manager):

    - `data` a packed dataset path (or an open PackedDataset): the packed loader
      (fastloader.loader.packed.PackedLoader), the fast path. A producer thread runs
      `prefetch` batches ahead, decoding with `num_threads` native threads (GIL released)
      straight into a fixed ring of (pinned, with CUDA) uint8 buffers; `transforms` run fused
      into decode (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip) with parameters
      drawn from (seed, epoch, batch, rank), so results never depend on the thread count.
      Images come out NCHW on `device` (default: this process's CUDA device when there is
      one): uint8 without `normalize`, else `dtype` (float32) computed as (x/255 - mean) / std;
      mean/std in 0-1 scale, or 0-255 scale when a mean exceeds 1. Labels int64.
    - the same with `backend="dali"`: the DALI loader (fastloader.loader.dali.DaliLoader):
      DALI decodes, with nvJPEG on a GPU; needs `pip install "fastloader[dali]"`.
    - `data` a map-style torch Dataset: the drop-in loader
      (fastloader.loader.dropin.DropInLoader), torch's DataLoader with tuned defaults;
      DataLoader's own keyword arguments are accepted there.

    `num_threads="auto"` (the default) tunes the decode threads online: it starts at all the
    cores this rank may use and steps down only when fewer threads are as fast or still keep
    up with the training step (see fastloader.loader.autotune), then keeps the choice for the
    run; an int fixes it, None means all those cores. `prefetch="auto"` likewise deepens the
    ring while the consumer waits on a bursty producer, never beyond `memory_budget` bytes of
    ring (512 MiB by default). stats() shows the choice.

    `verify_records=True` (packed loader; default False) checks each record's crc32 as it is
    read (about 3% of the loader's CPU on ImageNet-sized records): a damaged record then fails as
    CorruptRecordError, which `on_error="skip"` skips, instead of being decoded as whatever its
    bytes now say.

    `backend`: "auto" (native decode, Pillow when the extension is missing), "native" (demand
    the extension), "pillow", or "dali". `gpu_transforms`: fastloader.gpu.ops transforms
    applied batched on `device` after the copy, on uint8 pixels, before normalize.

    Each pass follows `sampler.epoch`; a pass that runs to its end advances the epoch by one
    (reshuffling like DataLoader(shuffle=True)); set_epoch(e) chooses it explicitly.
    """

    def __new__(cls, data: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is FastLoader:  # the factory: the one place that knows all three loaders
            cls = _loader_class(data, kwargs.get("backend", "auto"))
        return super().__new__(cls)

    # -- the interface every loader implements ----------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch of the next pass."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands, for load_state_dict to resume exactly."""
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a state_dict: the next pass yields exactly the batches left."""
        raise NotImplementedError

    def stats(self) -> Any:
        """Live counters (fastloader.loader.stats.LoaderStats)."""
        raise NotImplementedError

    def close(self) -> None:
        """Free threads, buffers and an owned dataset; safe to call twice."""
        raise NotImplementedError

    # -- lifetime, shared ---------------------------------------------------------------------

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: modules may be gone
            self.close()


def _loader_class(data: Any, backend: Any) -> type[FastLoader]:
    """The loader class for these arguments: drop-in for a torch Dataset, DALI for
    backend="dali", the packed loader otherwise (each checks the rest of its arguments)."""
    import torch

    from fastloader.format.dataset import PackedDataset

    if isinstance(data, torch.utils.data.Dataset) and not isinstance(data, PackedDataset):
        from fastloader.loader.dropin import DropInLoader

        return DropInLoader
    if backend not in BACKENDS:
        raise invalid_argument("backend", backend, f"must be one of {BACKENDS}",
                               "Use 'auto' (native decode, Pillow without the extension) "
                               "or 'dali' for the NVIDIA DALI pipeline.")
    if backend == "dali":
        from fastloader.loader.dali import DaliLoader  # only when asked: an optional extra

        return DaliLoader
    from fastloader.loader.packed import PackedLoader

    return PackedLoader


def refuse_dataloader_kwargs(dataloader_kwargs: dict[str, Any], path: str) -> None:
    """The packed paths take no DataLoader-only keyword: name the first one given."""
    if dataloader_kwargs:
        name = sorted(dataloader_kwargs)[0]
        raise invalid_argument(
            name, dataloader_kwargs[name], f"is a DataLoader argument the {path} does not "
            "take", "Drop it; use num_threads= for parallelism and prefetch= for depth.")
