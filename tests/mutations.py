"""Mutations of encoded bytes for the fuzz tests' child processes (JPEGs, coeffs records, audio
clips): a truncation, random bytes anywhere or in the headers, one flipped bit in the payload,
or a chunk spliced out or duplicated; drawn from the caller's seeded generator."""

from __future__ import annotations

import numpy as np


def mutate(data: bytes, rng: np.random.Generator, *, header_end: int, keep: int = 0,
           splice: int = 64, bit_flips_from: float | None = None) -> bytes:
    """One mutation of data. keep: leading bytes never changed (a magic the caller routes
    by); header_end: where the header region the header mutations hit ends; splice: the
    longest chunk spliced out or duplicated; bit_flips_from: where (a fraction of the length)
    single-bit flips of the payload start, None for no bit flips."""
    out = bytearray(data)
    kind = int(rng.integers(0, 4 if bit_flips_from is None else 5))
    if kind == 0:
        return bytes(out[: rng.integers(0, len(out))])
    if kind in (1, 2):  # a few bytes anywhere, or fewer in the headers
        end = len(out) if kind == 1 else min(header_end, len(out))
        for pos in rng.integers(keep, end, rng.integers(1, 8 if kind == 1 else 4)):
            out[pos] = rng.integers(0, 256)
        return bytes(out)
    if kind == 4:
        assert bit_flips_from is not None
        pos = int(rng.integers(int(len(out) * bit_flips_from), len(out)))
        out[pos] ^= 1 << int(rng.integers(0, 8))
        return bytes(out)
    start = rng.integers(keep, len(out))
    stop = min(len(out), start + rng.integers(1, splice))
    if rng.integers(0, 2):
        return bytes(out[:start] + out[stop:])
    return bytes(out[:stop] + out[start:])
