"""Batch plans of the audio loader: one epoch's global batches, a pure function of (seed, epoch,
the clips' durations), dealt to ranks in equal numbers and resumed by position.

Two plans: fixed-count batches of the epoch's order, or duration-bucketed ones
(max_batch_seconds): clips are put in `buckets` buckets by length (the dataset's duration
quantiles), each bucket's clips are cut into batches in the epoch's order while the batch's
padded seconds (count x its longest clip) stay within the limit, and the batches are shuffled
together. Padded seconds bound the batch tensor itself: B x T <= max_batch_seconds x rate (plus
one frame a clip for rounding). A clip longer than the limit is a batch of its own.

The order is loader/order/sampler.epoch_indices' permutation for world size 1 (the same for every
rank); the global batches are dealt round-robin, rank r taking batches r, r + W, ..., so every
rank gets the same count (the tail wraps to the start, or is dropped with drop_last, as
DistributedSampler does with samples). Because the global plan does not depend on the world
size, a run resumed with another world size continues after what was already taken, by the
rule of loader/order/resume.py: fixed-count plans from the order's sample `position` (so another
batch size or drop_last resumes too: the rest of the order is cut anew), duration plans from
the global batches taken (their batches are the plan's, which max_batch_seconds and the
buckets fix, so those must match; world size and drop_last may change).
"""

from __future__ import annotations

import numpy as np

from fastloader.loader.order.sampler import epoch_indices


def bucket_edges(durations: np.ndarray, buckets: int) -> np.ndarray:
    """The (buckets - 1,) inner edges: quantiles of the durations (seconds)."""
    if buckets <= 1 or durations.size == 0:
        return np.zeros(0, np.float64)
    return np.quantile(durations, np.arange(1, buckets) / buckets)


def count_batches(order: np.ndarray, batch_size: int, drop_last: bool) -> list[np.ndarray]:
    """order cut into batches of batch_size (the last one short, or dropped)."""
    stop = len(order) - len(order) % batch_size if drop_last else len(order)
    return [order[i:i + batch_size] for i in range(0, stop, batch_size)]


def duration_batches(order: np.ndarray, durations: np.ndarray, max_seconds: float,
                     edges: np.ndarray) -> list[np.ndarray]:
    """order's clips cut into batches within max_seconds padded seconds, bucket by bucket
    (each bucket's clips in order's order), batches listed bucket after bucket."""
    bucket = np.searchsorted(edges, durations[order], side="right")
    batches: list[np.ndarray] = []
    for b in range(len(edges) + 1):
        members = order[bucket == b]
        start, longest = 0, 0.0
        for k, index in enumerate(members.tolist()):
            longer = max(longest, float(durations[index]))
            if k > start and (k - start + 1) * longer > max_seconds:
                batches.append(members[start:k])
                start, longer = k, float(durations[index])
            longest = longer
        if start < len(members):
            batches.append(members[start:])
    return batches


class BatchPlan:
    """An epoch's global batches for a loader's settings.

    Args:
        durations: each clip's seconds as the loader will read it (cropped), (N,) float64.
        seed: the order's and the batches' shuffle seed.
        shuffle: a new order (and batch order) each epoch.
        batch_size: samples per batch when max_seconds is None.
        max_seconds: the duration plan's padded-seconds limit, or None (fixed counts).
        buckets: the duration plan's bucket count.
        drop_last: drop the last short batch (fixed counts) and the uneven tail of batches.
    """

    def __init__(self, durations: np.ndarray, seed: int, shuffle: bool, batch_size: int,
                 max_seconds: float | None, buckets: int, drop_last: bool) -> None:
        self.durations = np.asarray(durations, np.float64)
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.batch_size, self.max_seconds = batch_size, max_seconds
        self.edges = bucket_edges(self.durations, buckets)
        # the last epoch's (order, batches): len(), iter() and state_dict() ask for one epoch
        self._last: tuple[int, np.ndarray, list[np.ndarray]] | None = None

    def _order(self, epoch: int) -> np.ndarray:
        return self._cached(epoch)[0]

    def _cached(self, epoch: int) -> tuple[np.ndarray, list[np.ndarray]]:
        if self._last is None or self._last[0] != epoch:
            order = epoch_indices(len(self.durations), epoch, self.seed, 0, 1, self.shuffle)
            self._last = epoch, order, self._cut(order, epoch)
        return self._last[1], self._last[2]

    def batches(self, epoch: int) -> list[np.ndarray]:
        """Every rank's batches of the epoch, in the order they are dealt."""
        return list(self._cached(epoch)[1])  # a new list: the cached one stays as built

    def _cut(self, order: np.ndarray, epoch: int) -> list[np.ndarray]:
        if self.max_seconds is None:
            return count_batches(order, self.batch_size, self.drop_last)
        batches = duration_batches(order, self.durations, self.max_seconds, self.edges)
        if self.shuffle:  # buckets mixed: a step's length does not follow the bucket order
            rng = np.random.Generator(np.random.PCG64([self.seed, epoch, 1]))
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    @property
    def by_samples(self) -> bool:
        """Whether a pass resumes from a sample position (fixed counts), not a batch one."""
        return self.max_seconds is None

    def rank_batches(self, epoch: int, rank: int, world: int, start: int = 0) -> list[np.ndarray]:
        """Rank `rank` of `world`'s batches of the epoch after `start` (taken before a
        resume): the first `start` samples of the order with fixed counts (the rest cut
        anew), the first `start` global batches by duration; an equal count on every rank."""
        if self.by_samples and start:
            rest = count_batches(self._order(epoch)[start:], self.batch_size, self.drop_last)
            return deal(rest, rank, world, 0, self.drop_last)
        return deal(self.batches(epoch), rank, world, start, self.drop_last)

    def after(self, epoch: int, start: int, taken: int) -> tuple[int, int]:
        """(where the next pass starts, samples of the order delivered) after `taken` global
        batches of a pass that began at `start`."""
        if self.by_samples:
            position = min(len(self.durations), start + taken * self.batch_size)
            return position, position
        sizes = np.array([len(b) for b in self._cached(epoch)[1]], np.int64)
        laps, rest = divmod(start + taken, len(sizes)) if len(sizes) else (0, 0)
        count = laps * int(sizes.sum()) + int(sizes[:rest].sum())
        return start + taken, min(len(self.durations), count)


def deal(batches: list[np.ndarray], rank: int, world: int, start: int,
         drop_last: bool) -> list[np.ndarray]:
    """Global positions start, start + 1, ... dealt round-robin, rank r taking positions
    start + r, start + r + world, ...; position p is batch p mod len(batches) (the tail wraps
    to the epoch's first batches, or is dropped with drop_last), so every rank gets
    (len - start) / world of them, rounded up (down with drop_last). A resume at a multiple of
    the same world size continues exactly where the ranks were."""
    left = max(0, len(batches) - start)
    if not batches or not left:
        return []
    per_rank = left // world if drop_last else -(-left // world)
    return [batches[(start + j * world + rank) % len(batches)] for j in range(per_rank)]
