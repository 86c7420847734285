"""The loaders' options as typed dataclasses, checked in full before anything is opened, and
which path (packed, DALI, drop-in) takes which option, read from those dataclasses' fields.

Building an options object checks every argument that can be checked without the dataset
(its fields and image sizes are checked once it is open), raising InvalidArgumentError or
InvalidTypeError named in FastLoader's words; a loader builds one before it opens a file or
starts a thread, so a bad argument never leaves half a loader behind.
"""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal

import numpy as np
import torch

from fastloader.checks import flag, int_at_least, positive_int
from fastloader.decode.augment import Transform, check_transforms, refuse_detection
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
from fastloader.loader.audio_options import Audio, check_audio, check_duration_args
from fastloader.loader.autotune import AUTO
from fastloader.loader.batch_transform import check_batch_transform
from fastloader.loader.sampler import (
    EpochSampler,
    planned_world,
    resolve_rank_world,
    threads_per_rank,
)
from fastloader.loader.skips import check_max_skips
from fastloader.loader.video_options import Video, check_video

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
    `decode_transforms` (the checked tuple), `target` (the torch.device), `constants`
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
        self.decode_transforms = check_transforms(self.transforms)
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

    def __post_init__(self) -> None:
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
    """What the loaders of timed clips share (loader/clips.py: audio=, video=): threads,
    prefetch, errors, record checks and the fields a batch holds."""

    batch_size: int = 1
    num_threads: int | Literal["auto"] | None = "auto"
    prefetch: int | Literal["auto"] = 2
    on_error: Literal["raise", "skip"] = "raise"
    verify_records: bool = False
    fields: Sequence[str] | None = None

    def __post_init__(self) -> None:
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


@dataclass
class AudioOptions(ClipOptions):
    """The audio loader's options (FastLoader(..., audio=fastloader.Audio(...)), a packed
    dataset of clips): loader/audio_options.py checks `audio` and the duration plan's."""

    audio: Audio | None = None
    max_batch_seconds: float | None = None
    duration_buckets: int = 8

    def _check_own(self) -> None:
        self.spec = check_audio(self.audio) or Audio()
        check_duration_args(self.max_batch_seconds, self.duration_buckets, self.batch_size)

    def plan_limits(self) -> tuple[float | None, int]:
        return self.max_batch_seconds, self.duration_buckets


@dataclass
class VideoOptions(ClipOptions):
    """The video loader's options (FastLoader(..., video=fastloader.Video(...)), a packed
    dataset of videos): loader/video_options.py checks `video`; the transforms give one crop
    and flip a clip."""

    video: Video | None = None
    transforms: Transforms = None

    def _check_own(self) -> None:
        self.spec = check_video(self.video) or Video()
        self.decode_transforms = check_transforms(self.transforms)
        refuse_detection(self.decode_transforms, "the video loader",
                         "Use RandomResizedCrop, Resize, CenterCrop and RandomHorizontalFlip.")


def check_order(options: DecodeOptions, source: Sampler) -> None:
    """Check seed, rank, world_size, shuffle and sampler as the loader's sampler will (it needs
    the dataset's length, unknown until the dataset is open: 0 here, only the checks matter)."""
    EpochSampler.for_loader(0, options.seed, options.rank, options.world_size, options.shuffle,
                            options.drop_last, source)


# -- which path takes which option ------------------------------------------------------------

PATHS: dict[str, type[LoaderOptions]] = {
    "packed loader": PackedOptions, "DALI loader": DaliOptions, "drop-in loader": DropInOptions,
    "audio loader": AudioOptions, "video loader": VideoOptions}
FIXES = {
    "packed loader": "Drop it, or pass backend='dali' for the DALI loader.",
    "audio loader": "Drop it: the audio loader (audio=) decodes clips, not images.",
    "video loader": "Drop it: the video loader (video=) takes the transforms, fields and "
                    "threads options only.",
    "DALI loader": "Drop it, or use the native backend (backend='auto').",
    "drop-in loader": "Apply transforms inside the Dataset and use num_workers=/prefetch_factor=,"
                      " or pack the images with `packdata` and pass the packed path.",
}
# The fix for an option that only the audio loader takes, given to another path: load clips.
AUDIO_FIXES = {
    "drop-in loader": "Decode the clips inside the Dataset and use num_workers=/"
                      "prefetch_factor=, or pack the audio dataset with `packdata` and pass "
                      "the packed path with audio=fastloader.Audio(...).",
}
AUDIO_FIX = "Drop it, or pass audio=fastloader.Audio(...) for the audio loader of a packed " \
            "audio dataset."
PATH_WORDS = {"packed loader": "packed path", "DALI loader": "DALI loader",
              "audio loader": "audio loader of a packed audio dataset",
              "video loader": "video loader of a packed video dataset",
              "drop-in loader": "drop-in loader of a torch Dataset"}


def option_defaults(options: type[LoaderOptions]) -> dict[str, object]:
    """A path's options and their defaults, in field order."""
    return {f.name: f.default for f in fields(options) if f.init and f.default is not MISSING}


def factory_defaults() -> dict[str, object]:
    """Every FastLoader option with FastLoader's default: the packed loader's where it has the
    option, else the first other path's that does."""
    merged: dict[str, object] = {}
    for options in reversed(list(PATHS.values())):
        merged.update(option_defaults(options))
    packed = option_defaults(PackedOptions)
    return {name: packed.get(name, default) for name, default in merged.items()}


def paths_taking(name: str) -> list[str]:
    """The paths whose options include `name`."""
    return [path for path, options in PATHS.items() if name in option_defaults(options)]


# torch DataLoader's keyword arguments, read from its signature; those that are not FastLoader
# options too (batch_size, shuffle, drop_last) have no meaning on the packed paths.
DATALOADER_ARGS = tuple(name for name in inspect.signature(torch.utils.data.DataLoader).parameters
                        if name != "dataset")
DATALOADER_ONLY = tuple(n for n in DATALOADER_ARGS if n not in option_defaults(LoaderOptions))


def take_foreign(kwargs: dict[str, object], path: str) -> None:
    """Take out of kwargs the FastLoader options `path` does not take: at FastLoader's default
    they are dropped (so one set of keyword arguments serves every path), any other value is
    refused naming the path(s) that take it. The drop-in path's DataLoader arguments stay."""
    own = option_defaults(PATHS[path])
    keep = DATALOADER_ARGS if path == "drop-in loader" else ()
    defaults = factory_defaults()
    for name in [n for n in kwargs if n in defaults and n not in own and n not in keep]:
        value, default = kwargs.pop(name), defaults[name]
        if value is default or _equal(value, default):
            continue
        takers = paths_taking(name)
        named = [f"the {taker}" for taker in takers]
        where = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
        where = f"{where} only"
        fix = FIXES[path] if takers != ["audio loader"] else AUDIO_FIXES.get(path, AUDIO_FIX)
        raise invalid_argument(name, value, f"applies to {where}, not to the "
                               f"{PATH_WORDS[path]}", fix)


def _equal(value: object, default: object) -> bool:
    try:
        return bool(value == default)
    except Exception:  # an array or tensor compared to a default: not equal
        return False


def refuse_unknown(kwargs: dict[str, object], path: str) -> None:
    """The packed paths take no other keyword: name the first one given.

    A DataLoader argument says so; a name that is no DataLoader argument either is a typo:
    say so, and name the closest argument this path does take.
    """
    if not kwargs:
        return
    name = sorted(kwargs)[0]
    words = PATH_WORDS[path]
    if name in DATALOADER_ONLY:
        raise invalid_argument(
            name, kwargs[name], f"is a DataLoader argument the {words} does not take",
            "Drop it; use num_threads= for parallelism and prefetch= for depth.")
    accepted = list(option_defaults(PATHS[path]))
    close = difflib.get_close_matches(name, accepted, n=1)
    hint = f"Did you mean {close[0]}=?" if close else (
        f"The arguments it takes are: {', '.join(sorted(accepted))}.")
    raise invalid_argument(name, kwargs[name], f"is not an argument of FastLoader's {words}",
                           hint)

