"""Shared argument checks (ints with a minimum, flags): each failure names argument, rule, fix."""

from __future__ import annotations

import numpy as np

from fastloader.errors import invalid_argument, invalid_type


def int_at_least(name: str, value: object, minimum: int, fix: str | None = None,
                 also: str = "") -> int:
    """`value` as an int >= minimum (numpy integers accepted, bools refused).

    `fix` replaces the default advice; `also` names another accepted value (e.g. "'auto'").
    """
    alternative = f" or {also}" if also else ""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise invalid_type(name, value, f"an int >= {minimum}{alternative}")
    if value < minimum:
        raise invalid_argument(name, value, f"must be >= {minimum}",
                               fix or f"Pass {name} >= {minimum}{alternative}.")
    return int(value)


def positive_int(name: str, value: object) -> int:
    """`value` as an int >= 1 (numpy integers accepted, bools refused)."""
    return int_at_least(name, value, 1)


def flag(name: str, value: object) -> bool:
    """`value` as a bool (Python or numpy bools only: 0/1 or strings are refused)."""
    if not isinstance(value, (bool, np.bool_)):
        raise invalid_type(name, value, "True or False")
    return bool(value)
