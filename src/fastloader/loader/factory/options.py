"""The loaders' options as typed dataclasses, checked in full before anything is opened: what
every path shares, the packed, DALI and drop-in paths', and what the clip loaders share (each
clip loader's own is beside its kind's settings: loader/factory/audio_options.py, video_options.py).
Which path takes which option is read from their fields by loader/factory/option_paths.py.

Building an options object checks every argument that can be checked without the dataset
(its fields and image sizes are checked once it is open), raising InvalidArgumentError or
InvalidTypeError named in FastLoader's words; a loader builds one before it opens a file or
starts a thread, so a bad argument never leaves half a loader behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from fastloader.checks import flag, int_at_least, positive_int
from fastloader.decode.augment import Transform, refuse_detection
from fastloader.decode.boxes import DEFAULT_MIN_BOX_VISIBILITY, check_min_visibility
from fastloader.decode.orientation import Turns
from fastloader.errors import invalid_argument
from fastloader.format.dataset import PackedDataset
from fastloader.format.remote_dataset import DEFAULT_PREFETCH_SHARDS
from fastloader.gpu.device import (
    normalize_constants,
    resolve_device,
    resolve_dtype,
    resolve_memory_format,
)
from fastloader.gpu.ops import GpuCompose, device_ops
from fastloader.gpu.tensors import GpuTransform
from fastloader.loader.factory.view_options import (
    PixelOpsOn,
    View,
    check_views,
    refuse_pixel_ops,
    split_transforms,
)
from fastloader.loader.images.batch_transform import check_batch_transform
from fastloader.loader.order.sampler import (
    EpochSampler,
    planned_world,
    resolve_rank_world,
    threads_per_rank,
)
from fastloader.loader.pipeline.autotune import AUTO
from fastloader.loader.pipeline.skips import check_max_skips
from fastloader.loader.remote.options import Remote, check_remote

BACKENDS = ("auto", "native", "pillow", "dali")
MAX_THREADS = 1024  # far above any core count; more only fails in pthread_create

# The types of FastLoader's arguments, as its signature and the option classes spell them.
Transforms = Transform | Sequence[Transform] | None
Normalize = Sequence[Sequence[float] | float] | None
GpuTransforms = Sequence[GpuTransform] | None
Sampler = Iterable[int] | None
BatchTransform = Callable[[torch.Tensor], torch.Tensor] | None


@dataclass
class LoaderOptions:
    """What every path takes: batching, order, sharding and the target device."""

    batch_size: int | None = 1
    shuffle: bool = False
    seed: int = 0
    device: str | torch.device | None = None
    drop_last: bool = False
    rank: int | None = None
    world_size: int | None = None


@dataclass
class DropInOptions(LoaderOptions):
    """The drop-in loader's own options (DataLoader's keyword arguments go to DataLoader)."""

    def __post_init__(self) -> None:
        self.target = (None if self.device is None
                       else resolve_device(self.device, default_cuda=False))
        self.rank_world = resolve_rank_world(self.rank, self.world_size)


@dataclass
class DecodeOptions(LoaderOptions):
    """What the packed and DALI loaders share: decode, transforms, output and prefetch.

    Checked at construction; the resolved values are attributes that are not fields:
    `decode_transforms` (the checked geometric ones), `pixel_ops` (the pixel ops of
    `transforms`: decode/pixels), `target` (the torch.device), `constants`
    (normalize's mean and std in the 0-255 scale), `out_dtype`, `layout` (the memory format),
    `gpu_ops` (the device ops, normalize last) and `max_threads` (this rank's cores).
    """

    batch_size: int = 1
    transforms: Transforms = None
    normalize: Normalize = None
    dtype: torch.dtype | None = None
    num_threads: int | Literal["auto"] | None = "auto"
    prefetch: int | Literal["auto"] = 2
    on_error: Literal["raise", "skip"] = "raise"
    backend: Literal["auto", "native", "pillow", "dali"] = "auto"
    memory_budget: int | None = None
    gpu_transforms: GpuTransforms = None
    memory_format: torch.memory_format | None = None
    apply_exif_orientation: bool | None = None

    def __post_init__(self) -> None:
        self.batch_size = positive_int("batch_size", self.batch_size)
        if self.apply_exif_orientation is not None:
            flag("apply_exif_orientation", self.apply_exif_orientation)
        self.shuffle = flag("shuffle", self.shuffle)
        self.drop_last = flag("drop_last", self.drop_last)
        self.max_threads = threads_per_rank(planned_world(self.rank, self.world_size))
        if self.on_error not in ("raise", "skip"):
            raise invalid_argument("on_error", self.on_error, "must be 'raise' or 'skip'",
                                   "Pass on_error='skip' to replace undecodable samples.")
        self.decode_transforms, self.pixel_ops = split_transforms(self.transforms)
        self.target = resolve_device(self.device, default_cuda=True)
        self.constants = normalize_constants(self.normalize)
        self.out_dtype = resolve_dtype(self.dtype, self.constants is not None)
        self.layout = resolve_memory_format(self.memory_format)
        self.gpu_ops = device_ops(self.gpu_transforms, self.constants, self.out_dtype,
                                  self.memory_format)


@dataclass
class PackedOptions(DecodeOptions):
    """The packed loader's options (FastLoader's arguments for a packed dataset)."""

    backend: Literal["auto", "native", "pillow"] = "auto"  # backend="dali": DaliOptions
    max_skips: int | float | None = None
    sampler: Sampler = None
    batch_transform: BatchTransform = None
    verify_records: bool = False
    fields: Sequence[str] | None = None
    multi_hot: int | Mapping[str, int] | None = None
    padded: bool = False
    min_box_visibility: float = DEFAULT_MIN_BOX_VISIBILITY
    decode_images: bool = True
    cache_dir: str | os.PathLike[str] | None = None
    cache_limit: int | str | None = None
    storage_options: Mapping[str, Any] | None = None
    shuffle_window: int | None = None
    prefetch_shards: int = DEFAULT_PREFETCH_SHARDS
    views: Sequence[View] | None = None
    pixel_ops_on: PixelOpsOn = "auto"
    remote: Remote | None = None  # decode on Ray workers too (loader/remote/)

    def __post_init__(self) -> None:
        self.remote = check_remote(self.remote)
        self.max_skips = check_max_skips(self.max_skips, self.on_error)
        self.verify_records = flag("verify_records", self.verify_records)
        if self.backend not in BACKENDS or self.backend == "dali":
            raise invalid_argument("backend", self.backend,
                                   "is not a backend of the packed loader",
                                   "Pass 'auto', 'native' or 'pillow' (FastLoader(..., "
                                   "backend='dali') builds the DALI loader).")
        super().__post_init__()
        check_order(self, self.sampler)
        self.batch_transform = check_batch_transform(self.batch_transform)
        self.decode_images = flag("decode_images", self.decode_images)
        self.padded = flag("padded", self.padded)
        self.min_box_visibility = check_min_visibility(self.min_box_visibility)
        # The tuner's settings, as autotune.make_tuner checks them (it needs the ring's slot
        # size too, known once the dataset is open).
        if isinstance(self.num_threads, (int, np.integer)) and not isinstance(
                self.num_threads, bool) and self.num_threads > MAX_THREADS:
            raise invalid_argument("num_threads", self.num_threads,
                                   f"must be at most {MAX_THREADS}",
                                   "Pass 'auto' or about the number of cores.")
        if self.num_threads not in (AUTO, None):
            int_at_least("num_threads", self.num_threads, 1, also=repr(AUTO))
        if self.prefetch != AUTO:
            int_at_least("prefetch", self.prefetch, 1, also=repr(AUTO))
        if self.memory_budget is not None:
            int_at_least("memory_budget", self.memory_budget, 1)
        if self.gpu_ops is not None and self.constants is not None:
            # The ops normalize, last: the copy step only moves uint8 pixels.
            self.step_args: tuple[Normalize, torch.dtype | None, torch.memory_format | None] = (
                None, torch.uint8, self.memory_format)
        else:
            self.step_args = (self.normalize, self.dtype, self.memory_format)
        plan = check_views(self)  # views=, pixel_ops_on=: what runs where
        self.view_list, self.pixels_on_device = plan.views, plan.on_device
        self.after_copy = plan.after_copy  # the device ops after the copy (None: none)
        if plan.uint8_copy:  # the pixel ops run on the device: normalize after them
            self.step_args = (None, torch.uint8, None)


@dataclass
class DaliOptions(DecodeOptions):
    """The DALI loader's options (FastLoader(..., backend="dali")).

    `roi_decode`: decode only the planned box (False decodes whole images and slices: more
    work, but DALI's docs say ROI decoding turns the A100/H100 hardware decoder off).
    """

    num_threads: int | Literal["auto"] | None = None
    prefetch: int = 2  # DALI's queue depth: no "auto"
    max_skips: int | float | None = None
    backend: Literal["dali"] = "dali"
    memory_budget: None = None
    roi_decode: bool = True

    def __post_init__(self) -> None:
        # FastLoader's arguments the DALI path cannot honour: refused, never dropped silently.
        for name, default in (("backend", "dali"), ("memory_budget", None)):
            value = getattr(self, name)
            if value != default:
                raise invalid_argument(name, value, 'is not supported by backend="dali"',
                                       f"Drop it, or use the native backend for {name}.")
        if self.apply_exif_orientation:  # DALI decodes as stored (adjust_orientation=False)
            raise invalid_argument("apply_exif_orientation", True,
                                   'is not supported by backend="dali"', "Use the native "
                                   "backend (backend='auto'), which turns images as "
                                   "PIL.ImageOps.exif_transpose does.")
        refuse_pixel_ops(self.transforms, 'backend="dali"', "Use the native backend "
                         "(backend='auto'), which runs pixel ops in its decode or on the device.")
        super().__post_init__()
        self.max_skips = check_max_skips(self.max_skips, self.on_error)
        check_order(self, None)
        self.prefetch = positive_int("prefetch", self.prefetch)
        refuse_detection(self.decode_transforms, 'backend="dali"', "Use the native backend "
                         "(backend='auto'), which letterboxes and plans box-aware crops.")
        # GPU ops see pixels, not normalized values: DALI then hands over uint8 and the
        # normalize runs last, on the device, after the ops.
        self.torch_normalizes = self.gpu_ops is not None and self.constants is not None
        self.dali_ops = self.gpu_ops if self.gpu_ops is not None else GpuCompose([])
        # DALI has no online tuner: "auto" (and None) mean all the cores this rank may use.
        threads = self.max_threads if self.num_threads in (AUTO, None) else self.num_threads
        self.threads = positive_int("num_threads", threads)
        self.roi_decode = flag("roi_decode", self.roi_decode)


def exif_turns(apply: bool | None, dataset: PackedDataset,
               path: str = "packed loader") -> Turns:
    """How the loader shows the open dataset's images (decode/orientation.Turns): turned by the
    EXIF orientations the index holds (pack --apply-exif-orientation) when apply is True, or
    None and the dataset has them; as stored otherwise (the default of every other dataset)."""
    orientations = dataset.orientations
    if apply is None:
        apply = orientations is not None
    if apply and orientations is None:
        raise invalid_argument(
            "apply_exif_orientation", True, f"{dataset.root} was packed without its images' "
            "EXIF orientations (the index holds none, and records are not parsed again)",
            "Pack it again with `packdata --apply-exif-orientation` (pack(..., "
            "apply_exif_orientation=True)), or drop the argument.")
    if apply and path == "DALI loader":
        raise invalid_argument(
            "apply_exif_orientation", True, f'is not supported by backend="dali" ({dataset.root} '
            "was packed with --apply-exif-orientation)", "Pass apply_exif_orientation=False "
            "to load the images as stored, or use the native backend (backend='auto').")
    if not apply:
        return Turns(dataset.stored_shapes, None)
    return Turns(dataset.stored_shapes, orientations, shapes=dataset.shapes)  # the index's


@dataclass
class ClipOptions(LoaderOptions):
    """What the loaders of timed clips share (loader/clips/loader.py: audio=, video=): threads,
    prefetch, errors, record checks and the fields a batch holds."""

    batch_size: int = 1
    num_threads: int | Literal["auto"] | None = "auto"
    prefetch: int | Literal["auto"] = 2
    on_error: Literal["raise", "skip"] = "raise"
    verify_records: bool = False
    fields: Sequence[str] | None = None
    remote: Remote | None = None  # decode on Ray workers too (loader/remote/)

    def __post_init__(self) -> None:
        self.remote = check_remote(self.remote)
        self.batch_size = positive_int("batch_size", self.batch_size)
        self.shuffle = flag("shuffle", self.shuffle)
        self.drop_last = flag("drop_last", self.drop_last)
        self.verify_records = flag("verify_records", self.verify_records)
        if self.on_error not in ("raise", "skip"):
            raise invalid_argument("on_error", self.on_error, "must be 'raise' or 'skip'",
                                   "Pass on_error='skip' to replace undecodable clips.")
        self._check_own()
        # no online tuner here: "auto" (and None) mean all the cores this rank may use
        cores = threads_per_rank(planned_world(self.rank, self.world_size))
        threads = cores if self.num_threads in (AUTO, None) else self.num_threads
        self.threads = min(positive_int("num_threads", threads), MAX_THREADS)
        self.depth = 2 if self.prefetch == AUTO else positive_int("prefetch", self.prefetch)
        self.target = resolve_device(self.device, default_cuda=True)
        EpochSampler.for_loader(0, self.seed, self.rank, self.world_size, self.shuffle,
                                self.drop_last)

    def _check_own(self) -> None:
        """A subclass checks its own options here."""

    def plan_limits(self) -> tuple[float | None, int]:
        """(max_batch_seconds, duration_buckets) of the batch plan: fixed counts here."""
        return None, 1


def check_order(options: DecodeOptions, source: Sampler) -> None:
    """Check seed, rank, world_size, shuffle and sampler as the loader's sampler will (it needs
    the dataset's length, unknown until the dataset is open: 0 here, only the checks matter)."""
    EpochSampler.for_loader(0, options.seed, options.rank, options.world_size, options.shuffle,
                            options.drop_last, source)
