"""FastLoader: the one face of three loaders (packed, drop-in, DALI), picked from the arguments."""

from __future__ import annotations

import atexit
import contextlib
import difflib
import inspect
import os
import weakref
from collections.abc import Iterator
from typing import Any

from fastloader.errors import invalid_argument
from fastloader.format.remote_dataset import DEFAULT_PREFETCH_SHARDS

BACKENDS = ("auto", "native", "pillow", "dali")

# Every loader built in this process, weakly: closed at interpreter exit, told after fork().
_LIVE: weakref.WeakSet[FastLoader] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    """Stop every loader's threads before the interpreter finalizes.

    A producer thread is a daemon; once finalization starts, a daemon thread that returns from
    native decode (GIL released) is killed by pthread_exit while it takes the GIL back, and that
    forced unwind through C++ aborts the process ("terminate called without an active
    exception", exit code 134). atexit runs before that point, so joining the threads here
    makes exit clean however a loader was left: finished, broken out of, raised through,
    still referenced by a live iterator, or never closed.
    """
    for loader in list(_LIVE):
        with contextlib.suppress(Exception):
            loader.close()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: let each loader drop what they held."""
    for loader in list(_LIVE):
        with contextlib.suppress(Exception):
            loader._after_fork_in_child()


atexit.register(_close_all_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)


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

    `on_error`: "raise" (default) stops at the first undecodable or corrupt record, naming it;
    "skip" replaces it with the next good record and counts it in stats(). `max_skips` (packed
    loader) is skip's error budget per pass: a count, or a fraction of the pass's samples;
    past it the pass fails naming every skipped record. Skips, autotune decisions and
    fallbacks are logged on the "fastloader" logger (logging.getLogger("fastloader")).

    `verify_records=True` (packed loader; default False) checks each record's crc32 as it is
    read (about 3% of the loader's CPU on ImageNet-sized records): a damaged record then fails as
    CorruptRecordError, which `on_error="skip"` skips, instead of being decoded as whatever its
    bytes now say.

    `backend`: "auto" (native decode, Pillow when the extension is missing), "native" (demand
    the extension), "pillow", or "dali". `gpu_transforms`: fastloader.gpu.ops transforms
    applied batched on `device` after the copy, on uint8 pixels, before normalize.

    Each iter() is a pass over one epoch. A pass that was started (run to its end or cut
    short) moves the next pass to the next epoch, reshuffled, as DataLoader(shuffle=True)
    reshuffles on every iter(); set_epoch(e) chooses the next pass's epoch explicitly. Rank and
    world size (unless given) are read from torch.distributed when each pass starts.

    Packed path only: `sampler` (any sized iterable of indices) sets each epoch's order before
    sharding; `batch_transform` (a callable of the uint8 NCHW batch, returning one like it)
    runs on the producer thread before normalize. See the README's training-code section.

    Args:
        data: a packed dataset folder (str or PathLike), its fsspec URL (s3://, gs://,
            http(s)://, file://; read through the shard cache), an open PackedDataset (the
            caller closes it), or a map-style torch Dataset (the drop-in loader).
        batch_size: samples per batch, >= 1.
        shuffle: a new order each epoch, drawn from (seed, epoch).
        seed: the seed of the order and of every random crop and flip.
        transforms: CPU transforms fused into decode (RandomResizedCrop, Resize, CenterCrop,
            RandomHorizontalFlip; packed native/Pillow paths also ResizeFit, RandomIoUCrop);
            None needs images of one size.
        normalize: (mean, std), 3 values each, in the 0-1 or 0-255 scale; None gives uint8.
        dtype: the floating output dtype with normalize (default float32).
        device: "cuda", "cuda:k" or "cpu"; default this process's CUDA device if any.
        num_threads: decode threads: "auto" (tuned online), an int, or None (all cores of
            this rank).
        prefetch: batches decoded ahead: an int >= 1 or "auto".
        drop_last: drop each rank's last partial batch.
        rank: this process's rank; default from torch.distributed when initialised, else 0.
        world_size: the number of ranks (default likewise).
        on_error: "raise" or "skip" (replace a bad record by the next good one).
        max_skips: with on_error="skip", the most samples one pass may replace: a count, or
            a fraction of the pass's samples; None for no limit (packed loader only).
        backend: "auto", "native", "pillow" or "dali".
        memory_budget: bytes of ring prefetch="auto" may use (default 512 MiB).
        gpu_transforms: fastloader.gpu ops run batched on device after the copy.
        memory_format: torch.contiguous_format (default) or torch.channels_last output.
        sampler: packed loader only: any sized iterable of indices giving each epoch's order
            (before sharding across ranks); not with shuffle=True.
        batch_transform: packed loader only: a callable on the uint8 NCHW batch that returns
            one like it, run on the producer thread before normalize (it holds the GIL).
        fields: packed loader only, for a dataset with fields (pack(samples, fields=...), a
            table, WebDataset files): the field names each batch holds, as a tuple in that
            order. None: (images, labels) for an image + label dataset, else a dict of every
            field. Collation (fastloader.loader.collate): int/float -> tensor [B]; fixed
            ndarrays -> tensor [B] + shape; variable-length ndarrays -> a list of tensors;
            text, bytes, json -> lists; further image fields -> uint8 (B, 3, H, W); boxes
            -> lists of float32 [k, 4] in output pixels; mask fields -> uint8 [B, H, W],
            cropped, resized (nearest) and flipped with their image's plan.
        multi_hot: packed loader only: NUM_CLASSES (or {field: NUM_CLASSES}) turns a
            variable-length int field (a multi-label list) into a [B, C] float32 tensor.
        padded: packed loader only: a variable-length ndarray field (variable in its first
            dim) comes as (values zero-padded to the batch's longest, lengths [B]).
        min_box_visibility: packed loader only: a boxes field's box whose visible area, after
            the sample's crop, is below this fraction of its whole area is dropped with its
            per-box fields (default 0.25; 0 keeps every box with any area inside).
        decode_images: packed loader only: further image fields (beyond the first) are
            decoded with the same transforms, their own crops and flips, as uint8 tensors
            (True, the default); False yields their encoded bytes.
        cache_dir, cache_limit, storage_options: packed loader on a dataset URL (s3://,
            gs://, http(s)://, file://): the node's shard cache folder, its byte limit (int or
            "200GB"), fsspec options (README "Datasets in object storage").
        shuffle_window: packed loader: shards shuffled together by the shard-aware shuffle
            (default 8 on a URL; None on a local dataset: the full permutation).
        prefetch_shards: packed loader on a URL: shards downloaded ahead of the reader.
        **dataloader_kwargs: the drop-in loader only: torch DataLoader arguments.

    Returns:
        FastLoader: a PackedLoader, DaliLoader or DropInLoader. Iterating it yields
        (images, labels) batches: images (N, 3, H, W) on device, labels (N,) int64 (with
        fields: a tuple or dict, see fields).

    Raises:
        InvalidArgumentError: an argument is out of range or names a wrong choice (the
            message names it and how to fix it).
        InvalidTypeError: an argument has the wrong type.
        DatasetNotFoundError: data is a path with no packed dataset.
        NativeUnavailableError: backend="native" without the extension.
        OptionalDependencyError: backend="dali" without NVIDIA DALI installed.
        DecodeError: while iterating, with on_error="raise", an undecodable record (or, with
            on_error="skip", more than max_skips of them); it names the record and batch.
        CorruptRecordError: while iterating, a record fails its read.
        ProducerError: while iterating, the dataset or a transform raised another exception
            (chained as its __cause__).
    """

    def __new__(cls, data: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is FastLoader:  # the factory: the one place that knows all three loaders
            cls = _loader_class(data, kwargs.get("backend", "auto"))
        loader = super().__new__(cls)
        _LIVE.add(loader)
        return loader

    # -- the interface every loader implements ----------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch of the next pass (its order, crops and flips).

        Args:
            epoch: the epoch, >= 0.

        Raises:
            InvalidArgumentError: epoch < 0.
        """
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands, for load_state_dict to resume exactly.

        Returns:
            dict: epoch, batches done in it, and what a loader must match to load it.
        """
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a state_dict: the next pass yields exactly the batches left.

        Loading during a pass ends that pass. A checkpoint of another rank of the same run
        loads too: each rank resumes its own shard of the order.

        Args:
            state: a dict from state_dict() of a loader built with the same arguments.

        Raises:
            InvalidArgumentError: the state does not match this loader (it names the field).
            InvalidTypeError: state is not a dict.
        """
        raise NotImplementedError

    def stats(self) -> Any:
        """Live counters.

        Returns:
            LoaderStats: a snapshot; .as_dict() gives a plain dict.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Free threads, buffers and an owned dataset; safe to call twice."""
        raise NotImplementedError

    def _after_fork_in_child(self) -> None:
        """Called in a forked child: forget threads and locks that only the parent has."""

    # -- lifetime, shared ---------------------------------------------------------------------

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: modules may be gone
            self.close()


class PackedAttributes:
    """The DataLoader attributes training frameworks read, with what is true of a packed loader.

    Lightning reads `batch_sampler` (then `.sampler`) to decide whether a loader shuffles and to
    call set_epoch; Accelerate and others read the DataLoader keyword attributes. A packed
    loader batches itself (no batch sampler: None, as DataLoader(batch_size=None) has) and
    decodes on threads rather than worker processes (num_workers=0). Its `dataset` and
    `collate_fn` (set by each loader: fastloader.loader.pass_dataset) are its passes as samples
    and the function that turns a batch's samples back into that batch, so a DataLoader built
    from these attributes yields the loader's batches.
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


def _loader_class(data: Any, backend: Any) -> type[FastLoader]:
    """The loader class for these arguments: drop-in for a torch Dataset, DALI for
    backend="dali", the packed loader otherwise (each checks the rest of its arguments)."""
    import torch

    from fastloader.format.dataset import PackedDataset
    from fastloader.loader.pass_dataset import unwrap_view

    data = unwrap_view(data)  # another packed loader's `dataset`: its packed dataset
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


def parameter_names(function: Any) -> list[str]:
    """The keyword names a loader's __init__ takes (for "did you mean" hints)."""
    return [name for name, p in inspect.signature(function).parameters.items()
            if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


# Arguments only the packed loader takes, with their defaults. The drop-in and DALI loaders take
# them at these values (so one set of keyword arguments serves every backend) and refuse others.
PACKED_LOADER_ONLY: dict[str, Any] = {
    "max_skips": None, "sampler": None, "batch_transform": None, "verify_records": False,
    "fields": None, "multi_hot": None, "padded": False, "decode_images": True,
    "cache_dir": None, "cache_limit": None, "storage_options": None, "shuffle_window": None,
    "prefetch_shards": DEFAULT_PREFETCH_SHARDS}


def take_defaults(kwargs: dict[str, Any], defaults: dict[str, Any], path: str,
                  fix: str) -> None:
    """Take the arguments named in `defaults` out of kwargs; refuse any not at its default."""
    for name, default in defaults.items():
        if name not in kwargs:
            continue
        value = kwargs.pop(name)
        if value is not default and value != default:
            raise invalid_argument(name, value, f"applies to the packed loader only, not to the "
                                   f"{path}", fix)


# torch DataLoader's keyword arguments that have no meaning on the packed paths.
DATALOADER_ONLY = ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn",
                   "multiprocessing_context", "generator", "prefetch_factor",
                   "persistent_workers", "pin_memory_device", "in_order", "batch_sampler",
                   "sampler")


def refuse_dataloader_kwargs(dataloader_kwargs: dict[str, Any], path: str,
                             accepted: Any = ()) -> None:
    """The packed paths take no DataLoader-only keyword: name the first one given.

    A name that is no DataLoader argument either is a typo: say so, and name the closest
    argument this loader does take (`accepted`: its parameter names).
    """
    if not dataloader_kwargs:
        return
    name = sorted(dataloader_kwargs)[0]
    if name in DATALOADER_ONLY:
        raise invalid_argument(
            name, dataloader_kwargs[name], f"is a DataLoader argument the {path} does not "
            "take", "Drop it; use num_threads= for parallelism and prefetch= for depth.")
    close = difflib.get_close_matches(name, list(accepted), n=1)
    hint = f"Did you mean {close[0]}=?" if close else (
        f"The arguments it takes are: {', '.join(sorted(accepted))}.")
    raise invalid_argument(name, dataloader_kwargs[name],
                           f"is not an argument of FastLoader's {path}", hint)
