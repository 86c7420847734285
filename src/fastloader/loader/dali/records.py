"""The DALI loader's records: framed as Pillow reads them, refused or replaced as the packed loader
does, and the record a failed DALI batch stopped on found by name.

DALI's JPEG parser is stricter than Pillow about header framing and laxer about short JFIF and
Adobe segments; fastloader.decode.jpeg_headers walks each record's header (up to SOS, never the
entropy data) so DALI sees the file Pillow would read and refuses what Pillow refuses. A record
that DALI still fails on is found after the fact (the native decoder first, then DALI alone on
each record of the batches in flight) and remembered, so on_error="skip" replaces it like the
packed loader does: by the next records after it, planned from (seed, epoch, batch, rank,
position, attempt).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastloader.decode.augment import plan
from fastloader.decode.jpeg_headers import pillow_framed
from fastloader.errors import DecodeError, FastloaderError
from fastloader.loader.dali.pipeline import dali_refuses
from fastloader.loader.pipeline.skips import RAISE_FIX, no_replacement, replacements


@dataclass
class FedBatch:
    """One batch as handed to DALI: what it holds after any replacement, and what it replaced."""

    b: int
    samples: np.ndarray  # the dataset indices fed (replacements included)
    records: list[Any]
    crops: np.ndarray
    flips: np.ndarray
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (record, why) replaced


class DaliRecords:
    """Reads, frames and (under on_error="skip") replaces the records of the DALI loader."""

    def __init__(self, data: Any, transforms: Any, on_error: str) -> None:
        self._data = data
        self._transforms = transforms
        self.on_error = on_error
        self.refused: dict[int, str] = {}  # record -> why DALI or the header walk refused it

    def framed(self, i: int) -> Any:
        """Record i as DALI should see it; DecodeError (remembered) when Pillow refuses it."""
        reason = self.refused.get(i)
        if reason is None:
            try:
                return pillow_framed(self._data.record(i))
            except DecodeError as exc:
                reason = self.refused[i] = str(exc)
        raise DecodeError(reason)

    def batch(self, b: int, samples: np.ndarray, crops: np.ndarray, flips: np.ndarray,
              key: Sequence[int]) -> FedBatch:
        """Batch b's records, framed; a refused one raises (naming it, batch and position) or,
        under on_error="skip", is replaced. key: (seed, epoch, rank) of the plan."""
        fed = FedBatch(b, samples.copy(), [], np.array(crops), np.array(flips))
        for k, i in enumerate(samples.tolist()):
            try:
                fed.records.append(self.framed(i))
            except DecodeError as exc:
                if self.on_error == "raise":
                    raise DecodeError(f"{self._data.describe(i)} failed to decode in DALI: "
                                      f"{exc} (batch {b}, position {k}). {RAISE_FIX}") from None
                fed.skipped.append((self._data.describe(i), str(exc)))
                fed.records.append(self._replace(fed, k, i, key))
        return fed

    def _replace(self, fed: FedBatch, k: int, sample: int, key: Sequence[int]) -> Any:
        seed, epoch, rank = key
        for candidate, rng in replacements(sample, len(self._data), (seed, epoch, fed.b, rank, k)):
            try:
                record = self.framed(candidate)
            except (DecodeError, FastloaderError):
                continue
            crops, flips, _ = plan(self._transforms, self._data.stored_shapes[[candidate]], rng)
            fed.samples[k], fed.crops[k], fed.flips[k] = candidate, crops[0], flips[0]
            return record
        raise no_replacement(f"{self._data.describe(sample)} cannot be decoded "
                             f"({self.refused.get(sample)})")

    def find_refused(self, batches: Iterable[FedBatch]) -> list[tuple[FedBatch, int, int]]:
        """The (batch, position, record) DALI fails on among `batches`, each remembered: the
        native decoder's refusals first, else DALI's own, one record at a time."""
        fed = list(batches)
        for check in (_native_refuses, dali_refuses):
            found = []
            for batch in fed:
                pairs = zip(batch.samples.tolist(), batch.records, strict=True)
                for k, (i, record) in enumerate(pairs):
                    reason = check(record)
                    if reason is not None:
                        self.refused[i] = reason
                        found.append((batch, k, i))
            if found:
                return found
        return []


def _native_refuses(record: Any) -> str | None:
    """Why the loader's own decoder refuses record, or None. A whole-file check decode
    (decode.check_size: every scan entropy-decoded, at the cheapest scale) finds what a
    full-size decode would, as pack and verify prove records."""
    from fastloader.decode.decode import check_size, decode, header

    try:
        head = header(record)
        decode(record, size=check_size(head.height, head.width))
    except FastloaderError as exc:
        return str(exc)
    return None
