"""Argument checks shared by the loaders: each failure names the argument, rule and fix."""

from __future__ import annotations

import numpy as np

from fastloader.errors import invalid_argument, invalid_type


def positive_int(name: str, value: object) -> int:
    """`value` as an int >= 1 (numpy integers accepted, bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise invalid_type(name, value, "an int >= 1")
    if value < 1:
        raise invalid_argument(name, value, "must be >= 1", f"Pass {name} >= 1.")
    return int(value)


def flag(name: str, value: object) -> bool:
    """`value` as a bool (Python or numpy bools only: 0/1 or strings are refused)."""
    if not isinstance(value, (bool, np.bool_)):
        raise invalid_type(name, value, "True or False")
    return bool(value)
