"""Argument checks the decode-time transforms share: output sizes and (low, high) ranges."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fastloader.errors import invalid_argument, invalid_type

MAX_SIDE = 65535  # the largest JPEG (and PNG in practice) side: output sizes stay below it


def size_pair(name: str, size: object) -> tuple[int, int]:
    """Normalise an int or (height, width) size, rejecting non-positive values."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        pair = (int(size), int(size))
    elif isinstance(size, Sequence) and len(size) == 2 and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in size
    ):
        pair = (int(size[0]), int(size[1]))
    else:
        raise invalid_type(name, size, "an int or a (height, width) pair of ints")
    if min(pair) <= 0:
        raise invalid_argument(name, size, "sizes must be positive", "Pass e.g. 224 or (224, 224).")
    if max(pair) > MAX_SIDE:  # no image is larger (JPEG's limit); a batch of them would not fit
        raise invalid_argument(name, size, f"sizes must be at most {MAX_SIDE} pixels",
                               "Pass e.g. 224 or (224, 224).")
    return pair


def range_pair(name: str, value: object) -> tuple[float, float]:
    """Normalise a (low, high) range of positive floats with low <= high."""
    if not isinstance(value, Sequence) or len(value) != 2:
        raise invalid_type(name, value, "a (low, high) pair of numbers")
    low, high = float(value[0]), float(value[1])
    if not (0 < low <= high) or not math.isfinite(high):
        raise invalid_argument(
            name, value, "needs 0 < low <= high, both finite", "Pass e.g. (0.08, 1.0)."
        )
    return low, high
