"""fastloader: packed image datasets and a fast, pinned, prefetching PyTorch loader.

Public names load lazily, so `import fastloader` (and the `packdata` CLI) does not pay for
torch until a name that needs it is touched.
"""

# The TYPE_CHECKING imports below exist for type checkers only; __all__ is built from _EXPORTS.
# ruff: noqa: F401

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "BatchDecoder": "fastloader.decode",
    "CenterCrop": "fastloader.augment",
    "CorruptRecordError": "fastloader.errors",
    "DaliLoader": "fastloader.dali",
    "DatasetError": "fastloader.errors",
    "DatasetNotFoundError": "fastloader.errors",
    "DecodeError": "fastloader.errors",
    "FastLoader": "fastloader.loader",
    "FastloaderError": "fastloader.errors",
    "GpuColorJitter": "fastloader.gpu_ops_pixel",
    "GpuCompose": "fastloader.gpu_ops",
    "GpuCutMix": "fastloader.gpu_ops_pixel",
    "GpuMixUp": "fastloader.gpu_ops_pixel",
    "GpuNormalize": "fastloader.gpu_ops",
    "GpuRandomHorizontalFlip": "fastloader.gpu_ops",
    "GpuRandomResizedCrop": "fastloader.gpu_ops",
    "ImageHeader": "fastloader.decode_pillow",
    "InvalidArgumentError": "fastloader.errors",
    "LoaderStats": "fastloader.stats",
    "Manifest": "fastloader.format.manifest",
    "NativeUnavailableError": "fastloader.errors",
    "OptionalDependencyError": "fastloader.errors",
    "PackError": "fastloader.errors",
    "PackedDataset": "fastloader.format.dataset",
    "RandomHorizontalFlip": "fastloader.augment",
    "RandomResizedCrop": "fastloader.augment",
    "Resize": "fastloader.augment",
    "decode": "fastloader.decode",
    "header": "fastloader.decode",
    "native_available": "fastloader._native",
    "open_dataset": "fastloader.format.dataset",
    "pack": "fastloader.pack.write",
    "profile": "fastloader.doctor",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # let type checkers see the real objects
    from fastloader._native import native_available
    from fastloader.augment import (
        CenterCrop,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
    )
    from fastloader.dali import DaliLoader
    from fastloader.decode import BatchDecoder, decode, header
    from fastloader.decode_pillow import ImageHeader
    from fastloader.doctor import profile
    from fastloader.errors import (
        CorruptRecordError,
        DatasetError,
        DatasetNotFoundError,
        DecodeError,
        FastloaderError,
        InvalidArgumentError,
        NativeUnavailableError,
        OptionalDependencyError,
        PackError,
    )
    from fastloader.format.dataset import (
        PackedDataset,
        open_dataset,
    )
    from fastloader.format.manifest import Manifest
    from fastloader.gpu_ops import (
        GpuCompose,
        GpuNormalize,
        GpuRandomHorizontalFlip,
        GpuRandomResizedCrop,
    )
    from fastloader.gpu_ops_pixel import (
        GpuColorJitter,
        GpuCutMix,
        GpuMixUp,
    )
    from fastloader.loader import FastLoader
    from fastloader.pack.write import pack
    from fastloader.stats import LoaderStats


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'fastloader' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
