"""on_error for the packed, DALI and audio loaders: "skip"'s error budget (max_skips: how many bad
records one pass may replace), its replacement candidates, and "raise"'s advice."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from fastloader.errors import DecodeError, invalid_argument, invalid_type

SKIP_ATTEMPTS = 16  # replacement candidates tried for one bad sample under on_error="skip"

# How a bad record under on_error="raise" says what to do (the packed and DALI loaders).
RAISE_FIX = ("Repack or remove that source file, or pass on_error='skip' to replace bad samples "
             "and count them in stats().")


def replacements(sample: int, n: int, key: Sequence[int]) -> Iterator[tuple[int, Any]]:
    """on_error="skip"'s candidates for bad record `sample` of n: the next records after it
    (sample+1, sample+2, ...), each with the generator its plan is drawn from, keyed by
    key = (seed, epoch, batch, rank, position) and the attempt: deterministic."""
    for attempt in range(1, SKIP_ATTEMPTS + 1):
        yield (sample + attempt) % n, np.random.default_rng([*key, attempt])


def no_replacement(error: str) -> DecodeError:
    """The error when every candidate of replacements() failed too."""
    return DecodeError(
        f"{error}; and the {SKIP_ATTEMPTS} records after it failed too, so no replacement "
        "was found. The dataset looks badly damaged: run `packdata verify` and repack it.")


class SkipBudget:
    """on_error="skip"'s error budget for one pass: at most `limit` replaced samples.

    max_skips is a count (int >= 0) or a fraction of the pass's samples (float in [0, 1));
    None means no limit. Past it the pass fails, naming every record skipped so far.
    """

    def __init__(self, max_skips: int | float | None, samples: int) -> None:
        if max_skips is None:
            self.limit: int | None = None
        elif isinstance(max_skips, float):
            self.limit = int(max_skips * samples)
        else:
            self.limit = max_skips
        self.max_skips = max_skips
        self.skipped: list[str] = []
        self._lock = threading.Lock()

    def spend(self, description: str) -> None:
        """Count one skipped record; raise DecodeError when the budget is exceeded."""
        with self._lock:
            self.skipped.append(description)
            if self.limit is None or len(self.skipped) <= self.limit:
                return
            count, records = len(self.skipped), "; ".join(self.skipped)
        raise DecodeError(
            f"on_error='skip' replaced {count} samples in this pass, more than "
            f"max_skips={self.max_skips!r} allows (limit {self.limit}): {records}. Run "
            "`packdata verify` on the dataset and repack it, or raise max_skips."
        )


def check_max_skips(max_skips: object, on_error: str) -> int | float | None:
    """max_skips as given when valid: None, a count >= 0, or a fraction in [0, 1)."""
    if max_skips is None:
        return None
    fix = "Pass a count of samples per pass (e.g. 10), a fraction (e.g. 0.01), or None."
    if isinstance(max_skips, bool) or not isinstance(max_skips, (int, float)):
        raise invalid_type("max_skips", max_skips, "an int, a float or None")
    if isinstance(max_skips, float) and not 0.0 <= max_skips < 1.0:
        raise invalid_argument("max_skips", max_skips, "a fraction must be in [0, 1)", fix)
    if isinstance(max_skips, int) and max_skips < 0:
        raise invalid_argument("max_skips", max_skips, "a count must be >= 0", fix)
    if on_error != "skip":
        raise invalid_argument("max_skips", max_skips, "is the budget of on_error='skip'",
                               "Pass on_error='skip' with it, or drop max_skips.")
    return max_skips
