"""A sample's size hint: its image's bytes known without preparing it (a file's size by stat,
a TarMember's size, len(bytes), an ndarray's nbytes), what the shard plan cuts an importer's
samples by."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from fastloader.pack.sources.values import TarMember


def size_hint(value: Any) -> int:
    """A sample's image size known without reading it: 0 when unknown (a missing file)."""
    if isinstance(value, TarMember):
        return int(value.size)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (str, os.PathLike)):
        try:
            return int(os.stat(value).st_size)
        except (OSError, ValueError):
            return 0
    return 0


def size_hints(samples: Any, image: str) -> np.ndarray:
    """int64 size hints of an importer's samples (a sequence of dicts, read here: importer
    code, never a user's __getitem__); a sequence may give them itself (size_hints(): COCO's
    MaskedSamples, groups.TarSamples), without building each sample."""
    if hasattr(samples, "size_hints"):
        return np.asarray(samples.size_hints(), np.int64)
    hints = np.zeros(len(samples), np.int64)
    for i in range(hints.size):
        sample = samples[i]
        if isinstance(sample, dict):
            hints[i] = size_hint(sample.get(image))
    return hints
