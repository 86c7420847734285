"""fastloader: packed image datasets and a fast, pinned, prefetching PyTorch loader.

Public names load lazily, so `import fastloader` (and the `packdata` CLI) does not pay for
torch until a name that needs it is touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "CenterCrop": "fastloader.augment",
    "CorruptRecordError": "fastloader.errors",
    "DatasetError": "fastloader.errors",
    "DatasetNotFoundError": "fastloader.errors",
    "DecodeError": "fastloader.errors",
    "FastLoader": "fastloader.loader",
    "FastloaderError": "fastloader.errors",
    "InvalidArgumentError": "fastloader.errors",
    "Manifest": "fastloader.format.manifest",
    "NativeUnavailableError": "fastloader.errors",
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
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # let type checkers see the real objects
    from fastloader._native import native_available
    from fastloader.augment import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize
    from fastloader.decode import decode, header
    from fastloader.errors import (
        CorruptRecordError,
        DatasetError,
        DatasetNotFoundError,
        DecodeError,
        FastloaderError,
        InvalidArgumentError,
        NativeUnavailableError,
        PackError,
    )
    from fastloader.format.dataset import PackedDataset, open_dataset
    from fastloader.format.manifest import Manifest
    from fastloader.loader import FastLoader
    from fastloader.pack.write import pack


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'fastloader' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
