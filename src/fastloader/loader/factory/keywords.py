"""FastLoader's keyword arguments by path, as TypedDicts: what its typed overloads
(loader/factory/base.py) unpack, so that each path's keywords are written once for type
checkers; tests/test_factory.py holds each to its path's options class
(loader/factory/options.py), which the loaders take."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

import torch

from fastloader.loader.factory.options import (
    BatchTransform,
    GpuTransforms,
    Normalize,
    Sampler,
    Transforms,
)
from fastloader.loader.factory.view_options import PixelOpsOn, View
from fastloader.loader.remote.options import Remote

# Every key is optional (total=False): the options classes give the defaults. A key the paths
# type differently (prefetch, backend, memory_budget) is declared by each path's own dict.


class SharedArgs(TypedDict, total=False):
    """What every path takes after batch_size and shuffle (options.LoaderOptions)."""

    seed: int
    device: str | torch.device | None
    drop_last: bool
    rank: int | None
    world_size: int | None


class DecodeArgs(SharedArgs, total=False):
    """What the packed and DALI paths share (options.DecodeOptions)."""

    transforms: Transforms
    normalize: Normalize
    dtype: torch.dtype | None
    num_threads: int | Literal["auto"] | None
    on_error: Literal["raise", "skip"]
    max_skips: int | float | None
    gpu_transforms: GpuTransforms
    memory_format: torch.memory_format | None
    apply_exif_orientation: bool | None


class PackedArgs(DecodeArgs, total=False):
    """The packed path's (options.PackedOptions)."""

    prefetch: int | Literal["auto"]
    backend: Literal["auto", "native", "pillow"]
    memory_budget: int | None
    sampler: Sampler
    batch_transform: BatchTransform
    verify_records: bool
    fields: Sequence[str] | None
    multi_hot: int | Mapping[str, int] | None
    padded: bool
    min_box_visibility: float
    decode_images: bool
    cache_dir: str | os.PathLike[str] | None
    cache_limit: int | str | None
    storage_options: Mapping[str, Any] | None
    shuffle_window: int | None
    prefetch_shards: int
    views: Sequence[View] | None
    pixel_ops_on: PixelOpsOn
    remote: Remote | None


class DaliArgs(DecodeArgs, total=False):
    """The DALI path's, besides backend="dali" that chooses it (options.DaliOptions)."""

    prefetch: int
    memory_budget: None
    roi_decode: bool


class ClipArgs(SharedArgs, total=False):
    """What the loaders of timed clips share (options.ClipOptions); each adds its own."""

    num_threads: int | Literal["auto"] | None
    prefetch: int | Literal["auto"]
    on_error: Literal["raise", "skip"]
    verify_records: bool
    fields: Sequence[str] | None
    remote: Remote | None
