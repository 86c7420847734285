"""A weighted mix's epoch: a global order of sample ids over several sources, a pure function
of (seed, epoch, the sources' sizes, weights, epoch size, replacement, shuffle).

The rule, in one sentence: an epoch holds `epoch_size` samples (default: every source's size
added up), source s gives round(weight_s * epoch_size) of them (largest remainders, so the
shares are exact to one sample), drawn from where the last epoch left off in that source's
own endless sequence of passes (each pass a fresh shuffle of the source; a small source thus
repeats, a large one is walked through over several epochs), or with `replacement=True` drawn
uniformly at random; the epoch's picks are then shuffled together (shuffle=False: interleaved
evenly, in each source's order). The loader's EpochSampler takes this order as a user's
sampler= (loader/order/sampler.py), so DDP sharding (disjoint and covering), thread-count
independence and exact, elastic resume are the packed loader's own.

Where the sampler's order is the bijection (loader/order/epoch_order.py: from ORDER_LIMIT samples
on, and a checkpoint keeps its run's kind) the same rule is evaluated at this rank's positions
only, nothing epoch-long is built: position p of the epoch is pick Bijection(epoch)(p), the
k-th pick of source s is place epoch * count_s + k of its passes, and a pass is a Bijection of
the source keyed by (seed, source, pass); with replacement, a keyed hash of (epoch, s, k).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

from fastloader.checks import int_at_least
from fastloader.errors import invalid_argument, invalid_type
from fastloader.loader.order.epoch_order import BIJECTION, Bijection, shard, splitmix, strided_share

EpochSize = int | Literal["sum", "shortest", "longest"] | None
EPOCH_SIZES = ("sum", "shortest", "longest")


def check_weights(weights: Sequence[float] | None, sizes: Sequence[int],
                  names: Sequence[str]) -> tuple[float, ...]:
    """The sources' weights as fractions summing to 1 (None: proportional to their sizes)."""
    if weights is None:
        total = sum(sizes)
        return tuple(n / total if total else 1 / len(sizes) for n in sizes)
    if len(weights) != len(sizes):
        raise invalid_argument("weights", list(weights), f"has {len(weights)} values for "
                               f"{len(sizes)} sources {list(names)}", "Give one per source.")
    values: list[float] = []
    for name, w in zip(names, weights, strict=True):
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) \
                or w < 0:
            raise invalid_argument(f"weights[{name!r}]", w, "must be a finite number >= 0",
                                   "Give each source a weight >= 0 (they need not sum to 1).")
        values.append(float(w))
    if sum(values) <= 0:
        raise invalid_argument("weights", list(weights), "are all 0",
                               "Give at least one source a weight > 0.")
    for name, w, n in zip(names, values, sizes, strict=True):
        if w > 0 and n == 0:
            raise invalid_argument(f"weights[{name!r}]", w, f"source {name!r} is empty",
                                   "Give an empty source weight 0, or drop it.")
    whole = sum(values)
    return tuple(w / whole for w in values)


def epoch_length(epoch_size: EpochSize, sizes: Sequence[int], weights: Sequence[float]) -> int:
    """Samples an epoch holds: an int as given; "sum" (None): all sources' sizes added;
    "shortest": until the first weighted source is used up once; "longest": until the
    last one is (every sample of every source at least once, the others repeated)."""
    if epoch_size is None or epoch_size == "sum":
        return int(sum(sizes))
    if isinstance(epoch_size, str):
        if epoch_size not in EPOCH_SIZES:
            raise invalid_argument("epoch_size", epoch_size, f"must be an int or one of "
                                   f"{EPOCH_SIZES}", "Pass e.g. epoch_size='sum'.")
        spans = [n / w for n, w in zip(sizes, weights, strict=True) if w > 0]
        return int(math.floor(min(spans)) if epoch_size == "shortest" else math.ceil(max(spans)))
    if isinstance(epoch_size, bool) or not isinstance(epoch_size, int):
        raise invalid_type("epoch_size", epoch_size, f"an int or one of {EPOCH_SIZES}")
    return int_at_least("epoch_size", epoch_size, 1)


def shares(total: int, weights: Sequence[float]) -> np.ndarray:
    """Each source's count in an epoch of `total`: the largest-remainder rounding of
    weight * total (they add up to total)."""
    exact = np.asarray(weights, dtype=np.float64) * total
    counts = np.floor(exact).astype(np.int64)
    left = total - int(counts.sum())
    if left > 0:  # the largest remainders take one more (ties: the earlier source)
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:left]] += 1
    return counts


class MixOrder:
    """The order of a mix's epochs, as the loader's sampler= takes one; EpochSampler asks it
    for a rank's share (rank_share) rather than iterating it.

    `weights` (fractions), `num_samples` (the epoch size) and `replacement` are the attributes
    a checkpoint's sampler fingerprint reads (loader/order/resume.sampler_identity).
    """

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], num_samples: int,
                 replacement: bool, shuffle: bool, seed: int) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.weights = tuple(float(w) for w in weights)
        self.num_samples = int(num_samples)
        self.replacement = bool(replacement)
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.counts = shares(self.num_samples, self.weights)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)  # picks'
        self._epoch = 0

    def _passes(self, s: int, begin: int, end: int) -> np.ndarray:
        """Positions begin..end-1 of source s's endless sequence of passes (local ids)."""
        n = int(self.sizes[s])
        out = []
        for k in range(begin // n, -(-end // n)):
            one = np.random.Generator(np.random.PCG64([self.seed, s, k, 0x313])).permutation(n) \
                if self.shuffle else np.arange(n, dtype=np.int64)
            lo, hi = max(begin - k * n, 0), min(end - k * n, n)
            out.append(one[lo:hi])
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def picks(self, s: int, epoch: int) -> np.ndarray:
        """Source s's samples (local ids) in `epoch`, in its order."""
        count = int(self.counts[s])
        if count == 0:
            return np.zeros(0, np.int64)
        if self.replacement:
            rng = np.random.Generator(np.random.PCG64([self.seed, epoch, s, 0x5EED]))
            return rng.integers(0, int(self.sizes[s]), count, dtype=np.int64)
        return self._passes(s, epoch * count, (epoch + 1) * count)

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        """The epoch's global order: sample ids (source offset + local id), int64."""
        self.seed = seed
        ids = np.concatenate([self.picks(s, epoch) + self.offsets[s]
                              for s in range(len(self.sizes))])
        if self.shuffle:
            mixing = np.random.Generator(np.random.PCG64([seed, epoch, 0x313]))
            return ids[mixing.permutation(len(ids))]
        # Interleaved evenly: pick j of a source of c picks sits at j / c (ties: source order).
        keys = np.concatenate([np.arange(c) / c for c in self.counts if c])
        return ids[np.argsort(keys, kind="stable")]

    # -- the bijection kind: evaluated at positions ----------------------------------------

    def _source_key(self, seed: int, s: int) -> int:
        return int(np.random.SeedSequence([seed, s, 0x313]).generate_state(1, np.uint64)[0]
                   >> np.uint64(1))

    def at(self, seed: int, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The sample ids at `positions` of the epoch's shuffled order (bijection kind)."""
        picks = Bijection(self.num_samples, seed, epoch)(np.asarray(positions, np.int64))
        starts = self.starts
        source = np.searchsorted(starts, picks, side="right") - 1
        out = np.empty(len(picks), dtype=np.int64)
        for s in np.unique(source).tolist():
            mine = np.flatnonzero(source == s)
            n, k = int(self.sizes[s]), picks[mine] - starts[s]
            if self.replacement:
                key = np.uint64(self._source_key(seed, s) ^ (epoch * 0x9E3779B97F4A7C15 % 2**64))
                local = (splitmix(k.astype(np.uint64) ^ key) % np.uint64(n)).astype(np.int64)
            else:
                place = epoch * int(self.counts[s]) + k
                local = np.empty(len(mine), dtype=np.int64)
                passes = place // n
                for one in np.unique(passes).tolist():
                    sel = np.flatnonzero(passes == one)
                    local[sel] = Bijection(n, self._source_key(seed, s), one)(place[sel] % n)
            out[mine] = local + self.offsets[s]
        return out

    def rank_share(self, seed: int, epoch: int, start: int, rank: int, world_size: int,
                   drop_last: bool, kind: str) -> np.ndarray:
        """Rank `rank`'s share of the epoch's order from `start` (loader/order/sampler.py's rule:
        positions start + rank, start + rank + W, ..., padded by wrapping or cut)."""
        if kind != BIJECTION or not self.shuffle:
            return shard(self.epoch_order(seed, epoch)[start:], rank, world_size, drop_last)
        return strided_share(lambda positions: self.at(seed, epoch, positions),
                             self.num_samples, start, rank, world_size, drop_last)

    # a sized iterable of indices, as sampler= takes (loader/order/sampler.EpochSampler.for_loader)

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(self.epoch_order(self.seed, self._epoch).tolist())

    def __len__(self) -> int:
        return self.num_samples

