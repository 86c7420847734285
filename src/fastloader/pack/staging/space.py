"""A pack's room on its disk: the output's size estimated from the plan's size hints before
the pack starts (refused when clearly larger than the free space, unless skip_space_check),
and a write that failed on a full disk told as a PackDiskFullError naming the folder, the room
needed and free, and that resume=True finishes the pack from the finished shards it kept.

LMDB reports a full disk as `mdb_txn_commit: Input/output error` (no errno), so a failure is
judged by the free space left where the pack writes, not by its message: ENOSPC or EDQUOT
anywhere in the error's chain, or an I/O error of LMDB or the OS while the folder has less
free than the pack still needs.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fastloader.errors import PackDiskFullError
from fastloader.format.disk_space import errors_of, free_bytes, human_bytes, is_disk, is_no_space
from fastloader.pack.staging.journal import Staging
from fastloader.pack.staging.plan import ShardPlan

MARGIN = 1.1  # the estimate may be this much over the free space before a pack is refused
_PAGE = 4096
_LMDB_LEAF = 2040  # LMDB keeps values up to about half a page in (part-filled) leaf pages
_PER_RECORD = 64  # the index arrays' bytes per record
_PER_SHARD = 4 * _PAGE  # a shard file's meta and tree pages, its part and journal entry
_FIXED = 64 << 10  # manifest.json, plan, the index files' headers
_GROWTH = {"coeffs": 1.5}  # a codec's output per source byte (docs: coeffs ~1.5x the bytes)
_LEAST = 1 << 20  # an I/O error with less free than this is the disk's, whatever the plan


def record_bytes(sizes: np.ndarray, backend: str, codec: str) -> np.ndarray:
    """Each record's estimated bytes in its shard file, from its size hint."""
    grown = (np.asarray(sizes, np.float64) * _GROWTH.get(codec, 1.0)).astype(np.int64) + 16
    if backend != "lmdb":
        return grown
    pages = -(-grown // _PAGE) * _PAGE  # overflow pages: a value takes whole pages
    return np.where(grown > _LMDB_LEAF, pages, grown * 3 // 2)


def estimate(plan: ShardPlan | None, backend: str, codec: str) -> tuple[int, int] | None:
    """(the whole dataset's bytes, its largest shard's) estimated from the plan's size hints;
    None where the plan knows no sizes (Python samples, cut by count; a plain iterable)."""
    if plan is None or plan.sizes.size == 0 or not plan.sizes.any():
        return None
    records = record_bytes(plan.sizes, backend, codec)
    shards = np.add.reduceat(records, plan.bounds[:-1]) if records.size else records
    total = int(records.sum()) + records.size * _PER_RECORD + plan.num_shards * _PER_SHARD
    return total + _FIXED, int(shards.max()) + _PER_SHARD


def staged_bytes(folder: Path) -> int:
    """The bytes of the files under folder (0 when it does not exist)."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


def check_room(staging: Staging, plan: ShardPlan | None, backend: str, codec: str,
               resume: bool) -> None:
    """Refuse a pack whose estimated output is clearly (MARGIN) larger than the free space
    where DST goes: PackDiskFullError naming both numbers (skip_space_check=True skips it)."""
    sizes = estimate(plan, backend, codec)
    if sizes is None or not is_disk(staging.dir.parent):
        return
    folder, staged = staging.dir.parent, staged_bytes(staging.dir)
    free = free_bytes(folder) + (0 if resume else staged)  # starting over clears the staging
    needed = max(0, sizes[0] - staged) if resume else sizes[0]
    if needed <= MARGIN * free:
        return
    source = int(plan.sizes.sum()) if plan is not None else 0
    raise PackDiskFullError(
        f"{staging.dst}: not enough free space in {folder}: the pack needs about "
        f"{human_bytes(needed)} there (an estimate from the source's {human_bytes(source)} in "
        f"{plan.sizes.size if plan is not None else 0} items) and {human_bytes(free)} is free; "
        "free some space or choose a DST on a bigger disk, or pass skip_space_check=True to "
        "pack anyway (if the disk fills, the finished shards are kept and resume=True "
        "finishes the pack once there is room).",
        folder, needed, free, dst=staging.dst, staging=staging.dir,
        kept=resume and any(staging.journal.glob("*.json")))


def disk_filled(exc: BaseException, staging: Staging, plan: ShardPlan | None, backend: str,
                codec: str) -> bool:
    """Whether exc, raised while the pack wrote into staging, is its disk filling up: ENOSPC
    or EDQUOT in its chain, or an I/O error (LMDB's has no errno) while the folder has less
    free than the pack still needs (at least its largest shard), or less than 1 MiB."""
    if not isinstance(exc, Exception):
        return False  # a stop signal stays one
    if is_no_space(exc):
        return True
    import lmdb

    if not any(isinstance(e, (OSError, lmdb.Error)) for e in errors_of(exc)):
        return False
    needed = _still_needed(staging, plan, backend, codec)
    return free_bytes(staging.dir.parent) < max(needed or 0, _LEAST)


def _still_needed(staging: Staging, plan: ShardPlan | None, backend: str, codec: str
                  ) -> int | None:
    """The bytes the pack still needs where it writes: what the estimate says is not staged
    yet, at least its largest shard; None when the plan knows no sizes."""
    sizes = estimate(plan, backend, codec)
    if sizes is None:
        return None
    return max(sizes[0] - staged_bytes(staging.dir), sizes[1])


def disk_full_error(staging: Staging, plan: ShardPlan | None, backend: str, codec: str,
                    kept: bool) -> PackDiskFullError:
    """The error for a pack whose disk filled (disk_filled), once its staging was kept (for
    resume=True) or removed: the folder, about how much more it needs, what is free."""
    folder, free = staging.dir.parent, free_bytes(staging.dir.parent)
    needed = _still_needed(staging, plan, backend, codec)
    need = (f"the pack needs about {human_bytes(needed)} more in {folder}" if needed is not None
            else f"the pack needs more room in {folder}")
    after = (f"the finished shards are kept in {staging.dir}: free some space there, then "
             "rerun with resume=True to finish the pack from them" if kept else
             "no shard had finished, so nothing is kept: free some space there (or choose a "
             "DST on a bigger disk), then rerun")
    return PackDiskFullError(
        f"{staging.dst}: the disk is full: {need} and {human_bytes(free)} is free there; {after}.",
        folder, needed, free, dst=staging.dst, staging=staging.dir, kept=kept)
