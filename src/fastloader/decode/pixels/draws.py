"""Counter-based per-sample randomness: uniforms hashed from (seed, epoch, key, view, draw).

No Generator per sample: every draw is splitmix64's finaliser over the sample's base hash plus a
counter, vectorised over the batch, so a sample's draws depend on nothing but its own identity
(never on the batch's other samples, their order or the thread count).
"""

from __future__ import annotations

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_TO_UNIT = 2.0 ** -53

# Each transform of the list owns this many draw numbers; its own draws count from there.
OP_STRIDE = 1 << 12


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _word(value: int) -> np.ndarray:
    """A Python int (any sign, reduced mod 2**64) as a uint64 array of one element."""
    return np.array([value % (1 << 64)], dtype=np.uint64)


class Draws:
    """The draws of one batch of samples, for one view: `uniform(counter)` -> float64 [N]."""

    def __init__(self, seed: int, epoch: int, keys: np.ndarray, view: int) -> None:
        with np.errstate(over="ignore"):
            base = _mix(_word(seed) + _GOLDEN)
            base = _mix(base ^ _word(epoch))
            base = _mix(base ^ _word(view) * _GOLDEN)
            self._base = _mix(base ^ keys.astype(np.int64).view(np.uint64))
        self._offset = 0
        self.size = int(keys.shape[0])

    def uniform(self, counter: int) -> np.ndarray:
        """Uniform floats in [0, 1), one a sample, for draw number `counter`."""
        with np.errstate(over="ignore"):
            bits = _mix(self._base + _word(self._offset + counter) * _GOLDEN)
        return (bits >> np.uint64(11)).astype(np.float64) * _TO_UNIT

    def block(self, first: int, count: int) -> np.ndarray:
        """Draws first, first + 1, ... (count of them) at once: float64 [count, N]."""
        counters = np.arange(first, first + count, dtype=np.uint64)[:, None]
        with np.errstate(over="ignore"):
            bits = _mix(self._base[None, :] + (counters + np.uint64(self._offset)) * _GOLDEN)
        return (bits >> np.uint64(11)).astype(np.float64) * _TO_UNIT

    def integers(self, counter: int, high: int) -> np.ndarray:
        """Integers in [0, high), one a sample (int64)."""
        return np.minimum((self.uniform(counter) * high).astype(np.int64), high - 1)

    def between(self, counter: int, low: float, high: float) -> np.ndarray:
        """Uniform floats in [low, high), one a sample."""
        return low + self.uniform(counter) * (high - low)

    def sub(self, offset: int) -> Draws:
        """These draws with counters shifted by `offset` (one transform's own stream)."""
        other = object.__new__(Draws)
        other._base, other.size = self._base, self.size
        other._offset = self._offset + offset
        return other
