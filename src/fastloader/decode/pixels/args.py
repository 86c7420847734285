"""Argument checks of the pixel ops: each refusal names the argument, value, rule and fix."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fastloader.errors import invalid_argument, invalid_type


def is_number(value: object) -> bool:
    """A real number (Python or numpy), bools excluded."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


def number(name: str, value: object) -> float:
    """`value` as a finite float."""
    if not is_number(value):
        raise invalid_type(name, value, "a number")
    result = float(value)  # type: ignore[arg-type]
    if not math.isfinite(result):
        raise invalid_argument(name, value, "must be finite", f"Pass a finite {name}.")
    return result


def probability(value: object, name: str = "p") -> float:
    """A probability in [0, 1]."""
    result = number(name, value)
    if not 0.0 <= result <= 1.0:
        raise invalid_argument(name, value, "must be in [0, 1]",
                               f"Pass {name} between 0 and 1 (1 applies the op to every sample).")
    return result


def pair(name: str, value: object) -> tuple[float, float]:
    """A (low, high) pair of finite numbers with low <= high."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise invalid_type(name, value, "a number or a (low, high) pair of numbers")
    low, high = number(name, value[0]), number(name, value[1])
    if low > high:
        raise invalid_argument(name, value, "needs low <= high", f"Pass {name}=(low, high).")
    return low, high


def jitter_range(name: str, value: object, center: float, bound: tuple[float, float]
                 ) -> tuple[float, float] | None:
    """torchvision's ColorJitter rule: v -> [center - v, center + v] (clipped at 0 off-hue); a pair
    is taken as is; both within `bound`. None where it leaves every image as it is."""
    if is_number(value):
        spread = number(name, value)
        if spread < 0:
            raise invalid_argument(name, value, "must be >= 0", f"Pass {name}=0 to disable it.")
        low, high = center - spread, center + spread
        if center == 1.0:
            low = max(low, 0.0)
    else:
        low, high = pair(name, value)
    if not bound[0] <= low <= high <= bound[1]:
        raise invalid_argument(name, value, f"its range ({low}, {high}) must lie in {bound}",
                               f"Pass a smaller {name}.")
    return None if low == high == center else (low, high)


def sigma_range(value: object, name: str = "sigma") -> tuple[float, float]:
    """GaussianBlur's sigma: a number > 0 or a pair 0 < low <= high."""
    low, high = (number(name, value),) * 2 if is_number(value) else pair(name, value)
    if low <= 0:
        raise invalid_argument(name, value, "must be > 0",
                               "Pass sigma=(0.1, 2.0) or a single positive number.")
    return low, high


def kernel_size(value: object, name: str = "kernel_size") -> tuple[int, int] | None:
    """torchvision's kernel_size: None, an odd int > 0 or a pair of them."""
    if value is None:
        return None
    sizes = (value, value) if not isinstance(value, Sequence) else tuple(value)
    if len(sizes) != 2:
        raise invalid_type(name, value, "None, an odd int or a pair of odd ints")
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
            raise invalid_type(name, value, "None, an odd int or a pair of odd ints")
        if size <= 0 or size % 2 == 0:
            raise invalid_argument(name, value, "must be odd and positive",
                                   "Pass e.g. kernel_size=23, or leave it out.")
    return int(sizes[0]), int(sizes[1])


def int_in(name: str, value: object, low: int, high: int, fix: str) -> int:
    """An int in [low, high] (numpy ints accepted, bools refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise invalid_type(name, value, f"an int in [{low}, {high}]")
    if not low <= value <= high:
        raise invalid_argument(name, value, f"must be in [{low}, {high}]", fix)
    return int(value)


def fill_value(value: object, name: str = "value") -> tuple[int, int, int]:
    """RandomErasing's value in pixel levels: an int 0..255 or an (R, G, B) triple of them."""
    fix = "Pass value as a level 0..255 or an (R, G, B) triple of levels, e.g. (124, 116, 104)."
    if isinstance(value, str):
        raise invalid_argument(name, value, "must be a level or an (R, G, B) triple", fix)
    levels = [value] * 3 if not isinstance(value, Sequence) else list(value)
    if len(levels) != 3:
        raise invalid_argument(name, value, "must have 1 or 3 levels", fix)
    out = []
    for level in levels:
        if isinstance(level, (bool, np.bool_)) or not isinstance(
                level, (int, float, np.integer, np.floating)) or float(level) != int(level):
            raise invalid_type(name, value, "an int level 0..255 or an (R, G, B) triple")
        if not 0 <= int(level) <= 255:
            raise invalid_argument(name, value, "levels must be in 0..255", fix)
        out.append(int(level))
    return out[0], out[1], out[2]
