"""fastloader: packed image datasets and a fast, pinned, prefetching PyTorch loader.

Public names load lazily, so `import fastloader` (and the `packdata` CLI) does not pay for
torch until a name that needs it is touched.
"""

# The TYPE_CHECKING imports below exist for type checkers only; __all__ is built from _EXPORTS.
# ruff: noqa: F401

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The library logs on "fastloader" (skips, autotune decisions, fallbacks) and never prints; it
# stays silent unless the application configures logging (a library's NullHandler).
logging.getLogger("fastloader").addHandler(logging.NullHandler())

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "Audio": "fastloader.loader.factory.audio_options",
    "AutoAugment": "fastloader.decode.pixels",
    "BatchDecoder": "fastloader.decode.decode",
    "CacheDiskFullError": "fastloader.errors",
    "CenterCrop": "fastloader.decode.augment",
    "ColorJitter": "fastloader.decode.pixels",
    "CorruptRecordError": "fastloader.errors",
    "DaliLoader": "fastloader.loader.dali.loader",
    "DatasetError": "fastloader.errors",
    "DatasetNotFoundError": "fastloader.errors",
    "DecodeError": "fastloader.errors",
    "DiskFullError": "fastloader.errors",
    "FastLoader": "fastloader.loader.loader",
    "FastloaderError": "fastloader.errors",
    "GaussianBlur": "fastloader.decode.pixels",
    "GpuColorJitter": "fastloader.gpu.pixel_ops",
    "GpuCompose": "fastloader.gpu.ops",
    "GpuCutMix": "fastloader.gpu.pixel_ops",
    "GpuMixUp": "fastloader.gpu.pixel_ops",
    "GpuNormalize": "fastloader.gpu.ops",
    "GpuRandomHorizontalFlip": "fastloader.gpu.ops",
    "GpuRandomResizedCrop": "fastloader.gpu.ops",
    "ImageHeader": "fastloader.decode.pillow",
    "InvalidArgumentError": "fastloader.errors",
    "InvalidTypeError": "fastloader.errors",
    "LoaderStats": "fastloader.loader.pipeline.stats",
    "LogMel": "fastloader.gpu.mel",
    "Manifest": "fastloader.format.manifest",
    "NativeUnavailableError": "fastloader.errors",
    "OptionalDependencyError": "fastloader.errors",
    "PackDiskFullError": "fastloader.errors",
    "PackError": "fastloader.errors",
    "PackedDataset": "fastloader.format.dataset",
    "ProducerError": "fastloader.errors",
    "RandAugment": "fastloader.decode.pixels",
    "RandomAutocontrast": "fastloader.decode.pixels",
    "RandomEqualize": "fastloader.decode.pixels",
    "RandomErasing": "fastloader.decode.pixels",
    "RandomGrayscale": "fastloader.decode.pixels",
    "RandomHorizontalFlip": "fastloader.decode.augment",
    "RandomIoUCrop": "fastloader.decode.detect",
    "RandomPosterize": "fastloader.decode.pixels",
    "RandomResizedCrop": "fastloader.decode.augment",
    "RandomSolarize": "fastloader.decode.pixels",
    "Resize": "fastloader.decode.augment",
    "Remote": "fastloader.loader.remote.options",
    "RemoteWorkersLostError": "fastloader.errors",
    "ResizeFit": "fastloader.decode.detect",
    "TrivialAugmentWide": "fastloader.decode.pixels",
    "Video": "fastloader.loader.factory.video_options",
    "View": "fastloader.loader.factory.view_options",
    "WorkerStats": "fastloader.loader.pipeline.stats",
    "decode": "fastloader.decode.decode",
    "header": "fastloader.decode.decode",
    "native_available": "fastloader.decode._native",
    "open_dataset": "fastloader.format.open",
    "pack": "fastloader.pack.api",
    "profile": "fastloader.doctor.doctor",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # let type checkers see the real objects
    from fastloader.decode._native import native_available
    from fastloader.decode.augment import (
        CenterCrop,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
    )
    from fastloader.decode.decode import BatchDecoder, decode, header
    from fastloader.decode.detect import RandomIoUCrop, ResizeFit
    from fastloader.decode.pillow import ImageHeader
    from fastloader.decode.pixels import (
        AutoAugment,
        ColorJitter,
        GaussianBlur,
        RandAugment,
        RandomAutocontrast,
        RandomEqualize,
        RandomErasing,
        RandomGrayscale,
        RandomPosterize,
        RandomSolarize,
        TrivialAugmentWide,
    )
    from fastloader.doctor.doctor import profile
    from fastloader.errors import (
        CacheDiskFullError,
        CorruptRecordError,
        DatasetError,
        DatasetNotFoundError,
        DecodeError,
        DiskFullError,
        FastloaderError,
        InvalidArgumentError,
        InvalidTypeError,
        NativeUnavailableError,
        OptionalDependencyError,
        PackDiskFullError,
        PackError,
        ProducerError,
        RemoteWorkersLostError,
    )
    from fastloader.format.dataset import PackedDataset
    from fastloader.format.manifest import Manifest
    from fastloader.format.open import open_dataset
    from fastloader.gpu.mel import LogMel
    from fastloader.gpu.ops import (
        GpuCompose,
        GpuNormalize,
        GpuRandomHorizontalFlip,
        GpuRandomResizedCrop,
    )
    from fastloader.gpu.pixel_ops import (
        GpuColorJitter,
        GpuCutMix,
        GpuMixUp,
    )
    from fastloader.loader.dali.loader import DaliLoader
    from fastloader.loader.factory.audio_options import Audio
    from fastloader.loader.factory.video_options import Video
    from fastloader.loader.factory.view_options import View
    from fastloader.loader.loader import FastLoader
    from fastloader.loader.pipeline.stats import LoaderStats, WorkerStats
    from fastloader.loader.remote.options import Remote
    from fastloader.pack.api import pack


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'fastloader' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
