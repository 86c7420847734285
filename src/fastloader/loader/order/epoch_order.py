"""An epoch's order, and a rank's share of it, without the whole order where it is large.

Below ORDER_LIMIT samples the order is numpy's PCG64 permutation seeded by (seed, epoch), as
it always was. From ORDER_LIMIT on, every rank building an n-long int64 permutation (800 MB
at 10^8 samples) only to keep 1/W of it costs more than the epoch is worth, so the order is a
seeded bijection of 0..n-1 instead: a Feistel network over the smallest power of 4 >= n,
cycle-walked into range, evaluated only at this rank's positions (in chunks, so temporaries
stay small). Both are pure functions of (n, seed, epoch); a checkpoint records which one its
run used ("order"), and a run keeps it (a run started before the bijection keeps the
permutation on any size).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

ORDER_LIMIT = 1 << 22  # samples from which a shuffled order is the bijection (32 MB as int64)
PERMUTATION, BIJECTION = "permutation", "bijection"
_ROUNDS = 4  # Feistel rounds: 4 make a keyed function a strong pseudo-random permutation
_CHUNK = 1 << 16  # positions evaluated at once: bounds the temporaries (~8 arrays of this)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64's


def default_kind(n: int) -> str:
    """The order a new run of n samples shuffles by."""
    return BIJECTION if n >= ORDER_LIMIT else PERMUTATION


def splitmix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a fast bijective 64-bit hash (uint64 wraps, as intended)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


class Bijection:
    """A seeded permutation of 0..n-1, evaluated at any positions."""

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        self.n = n
        self.half = max(1, (max(n - 1, 1).bit_length() + 1) // 2)  # 4**half >= n
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = np.random.SeedSequence([seed, epoch, 0xB17E]).generate_state(
            _ROUNDS, np.uint64)

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        shift = np.uint64(self.half)
        left, right = x >> shift, x & self.mask
        for key in self.keys:
            left, right = right, left ^ (splitmix(right ^ key) & self.mask)
        return (left << shift) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The samples at `positions` (int64, each in 0..n-1) of the order."""
        out = np.empty(len(positions), dtype=np.int64)
        n = np.uint64(self.n)
        for begin in range(0, len(positions), _CHUNK):
            x = self._feistel(positions[begin:begin + _CHUNK].astype(np.uint64))
            outside = np.flatnonzero(x >= n)
            while len(outside):  # cycle-walk: the domain is < 4n, so a few steps at most
                walked = self._feistel(x[outside])
                x[outside] = walked
                outside = outside[walked >= n]
            out[begin:begin + _CHUNK] = x.astype(np.int64)
        return out


def rank_share(n: int, epoch: int, seed: int, start: int, rank: int, world_size: int,
               drop_last: bool, kind: str) -> np.ndarray:
    """Rank `rank`'s share of a shuffled epoch's order from position `start`: positions
    start + rank, start + rank + W, ... (wrapping over the rest to pad, or cut to an even
    count with drop_last, as DistributedSampler does)."""
    rest = n - start
    if rest <= 0:
        return np.zeros(0, dtype=np.int64)
    if kind == PERMUTATION:
        order = np.random.Generator(np.random.PCG64([seed, epoch])).permutation(n)[start:]
        return shard(order, rank, world_size, drop_last)
    return strided_share(Bijection(n, seed, epoch), n, start, rank, world_size, drop_last)


def strided_share(order_at: Callable[[np.ndarray], np.ndarray], n: int, start: int, rank: int,
                  world_size: int, drop_last: bool) -> np.ndarray:
    """Rank `rank`'s share of an order of n evaluated at positions (order_at): positions
    start + rank, start + rank + W, ... of what is left from start, wrapping over it to pad (or
    cut to an even count with drop_last); the positions too a chunk at a time."""
    rest = n - start
    if rest <= 0:
        return np.zeros(0, dtype=np.int64)
    per_rank = rest // world_size if drop_last else -(-rest // world_size)
    share = np.empty(per_rank, dtype=np.int64)
    for begin in range(0, per_rank, _CHUNK):
        j = np.arange(begin, min(begin + _CHUNK, per_rank), dtype=np.int64)
        share[begin:begin + len(j)] = order_at(start + (rank + world_size * j) % rest)
    return share


def shard(order: np.ndarray, rank: int, world_size: int, drop_last: bool) -> np.ndarray:
    """Rank `rank`'s share of an epoch order: positions rank, rank + world_size, ...

    Without drop_last the order is padded by wrapping to the start so every rank gets the
    same count (DistributedSampler's rule); with drop_last the uneven tail is dropped.
    """
    per_rank = len(order) // world_size if drop_last else -(-len(order) // world_size)
    total = per_rank * world_size
    if total > len(order):  # pad by wrapping (may wrap several times when n < world_size)
        return np.asarray(order, dtype=np.int64)[
            np.arange(rank, total, world_size) % len(order)]  # not a padded copy of all
    return np.ascontiguousarray(order[rank:total:world_size], dtype=np.int64)
