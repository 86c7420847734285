"""The shard-aware shuffle: an epoch order that reads a window of W shards at a time.

A full shuffle touches every shard all epoch long, so a cache smaller than the dataset would
download each shard many times. Here each rank owns a fixed set of shards (balanced by record
count, from the seed alone, so a node's cache keeps serving the same shards); each epoch
permutes them, cuts them into windows of W shards, and shuffles the records within each
window. Only W shards (plus the prefetch) are needed at once. The order is a pure function of
(seed, epoch, rank, world_size), so state_dict resumes it exactly (and on another world size:
loader/order/resume.py), and every rank gets the same count (padded by wrapping its own order, or
cut to the smallest with drop_last).
"""

from __future__ import annotations

import numpy as np

from fastloader.errors import invalid_argument


def assign_shards(counts: np.ndarray, world_size: int, seed: int) -> list[np.ndarray]:
    """Each rank's shard ids: shards in a seed-fixed order, each to the rank with fewest
    records so far (ties to the lowest rank)."""
    if len(counts) < world_size:
        raise invalid_argument(
            "world_size", world_size, f"exceeds the dataset's {len(counts)} shards: the "
            "shard-aware shuffle gives each rank whole shards",
            "Pack the dataset with a smaller shard_size (more shards), or pass "
            "shuffle_window=None on a local dataset.")
    order = np.random.Generator(np.random.PCG64([seed, 0x5A4D])).permutation(len(counts))
    totals = np.zeros(world_size, dtype=np.int64)
    owned: list[list[int]] = [[] for _ in range(world_size)]
    for shard in order:
        rank = int(np.argmin(totals))
        owned[rank].append(int(shard))
        totals[rank] += int(counts[shard])
    return [np.sort(np.asarray(ids, dtype=np.int64)) for ids in owned]


def per_rank_count(counts: np.ndarray, world_size: int, seed: int, drop_last: bool) -> int:
    """The records every rank reads per epoch: the largest rank's (padded), or with
    drop_last the smallest's."""
    totals = [int(counts[ids].sum()) for ids in assign_shards(counts, world_size, seed)]
    return min(totals) if drop_last else max(totals)


def shard_epoch_indices(starts: np.ndarray, counts: np.ndarray, epoch: int, seed: int,
                        rank: int, world_size: int, window: int, shuffle: bool,
                        drop_last: bool) -> np.ndarray:
    """This rank's record indices (int64) for one epoch of the shard-aware shuffle.

    Args:
        starts: each shard's first record index.
        counts: each shard's record count.
        epoch, seed, rank, world_size: what the order is a function of.
        window: shards whose records are shuffled together (W >= 1).
        shuffle: False: the rank's shards in order, records in order.
        drop_last: cut every rank to the smallest rank's count instead of padding.

    Returns:
        np.ndarray: the indices, the same count on every rank.
    """
    if window < 1:
        raise invalid_argument("shuffle_window", window, "must be >= 1",
                               "Pass the number of shards shuffled together, e.g. 8.")
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    mine = assign_shards(counts, world_size, seed)[rank]
    target = per_rank_count(counts, world_size, seed, drop_last)
    rng = np.random.Generator(np.random.PCG64([seed, epoch, rank, 0x5A4D]))
    if shuffle:
        mine = rng.permutation(mine)
    parts = []
    for begin in range(0, len(mine), window):
        group = mine[begin:begin + window]
        records = np.concatenate([np.arange(starts[s], starts[s] + counts[s]) for s in group])
        if shuffle:
            rng.shuffle(records)
        parts.append(records)
    order = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(order) < target:  # pad by wrapping this rank's own order (its shards only)
        order = np.resize(order, target)
    return np.ascontiguousarray(order[:target], dtype=np.int64)
