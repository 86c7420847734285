"""A disk's free space, byte counts as people read them, whether an error is a full disk, and
the shard cache's full-disk error (naming cache_dir, the free space and cache_limit, and the
limit that would have kept the cache on its disk)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fastloader.errors import CacheDiskFullError, DiskFullError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # the disk, or the user's quota on it, is full


def _statvfs(folder: str | os.PathLike[str]) -> os.statvfs_result:
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:  # its nearest existing parent's
        path = path.parent
    return os.statvfs(path)


def free_bytes(folder: str | os.PathLike[str]) -> int:
    """The bytes a write in folder (or its nearest existing parent) can still use."""
    stat = _statvfs(folder)
    return stat.f_bavail * stat.f_frsize


def is_disk(folder: str | os.PathLike[str]) -> bool:
    """Whether folder's file system tells a size (/proc, /sys and the like tell none: their
    writes fail for other reasons, which their writers tell)."""
    return _statvfs(folder).f_blocks > 0


def human_bytes(count: float) -> str:
    """A byte count as people read it: 812 -> '812 B', 1536 -> '1.5 KiB' (up to TiB)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


def errors_of(exc: BaseException) -> list[BaseException]:
    """exc and the exceptions it was raised from or while handling (a bounded walk)."""
    chain: list[BaseException] = []
    at: BaseException | None = exc
    while at is not None and at not in chain and len(chain) < 16:
        chain.append(at)
        at = at.__cause__ or at.__context__
    return chain


def is_no_space(exc: BaseException) -> bool:
    """Whether exc is (or came from) an OSError saying the disk or the quota is full (not one
    of fastloader's DiskFullErrors: those have said so already)."""
    if isinstance(exc, DiskFullError):
        return False
    return any(isinstance(e, OSError) and e.errno in NO_SPACE for e in errors_of(exc))


def cache_disk_full(root: Path, limit: int | None, usage: int, least: int, name: str,
                    size: int) -> CacheDiskFullError:
    """The error for a shard cache (at root, under limit, holding usage bytes, whose reader
    holds `least` at once) whose disk filled while `name` (size bytes) was cached in it,
    naming cache_dir, the free space and cache_limit; where a cache_limit would have kept the
    cache within its disk (none set, or one larger than the disk leaves it), it says which,
    and where the disk cannot hold even what the reader holds at once, that."""
    free = free_bytes(root)
    room = usage + free  # what this disk leaves the cache now
    suggest = f'cache_limit="{human_bytes(max(size, least, int(room * 0.9)))}"'
    elsewhere = "free space on that disk, or pass a cache_dir on a bigger disk"
    if room < least:
        fix = (f"this disk leaves the cache {human_bytes(room)}, less than the "
               f"{human_bytes(least)} its reader holds at once (the index and the shards "
               f"of its shuffle window and prefetch), so no cache_limit fits: {elsewhere}")
    elif limit is None:
        fix = (f"no cache_limit is set, so the cache grows until its disk is full: pass "
               f"{suggest} (it would have evicted older shards instead), {elsewhere}")
    elif limit > room:
        fix = (f"cache_limit={human_bytes(limit)} is more than this disk leaves the cache "
               f"({human_bytes(room)}): pass {suggest} (it would have evicted older shards "
               f"instead), {elsewhere}")
    else:
        fix = f"cache_limit={human_bytes(limit)} fits this disk, but other files took its room: " \
              f"{elsewhere}"
    shown = "None" if limit is None else human_bytes(limit)
    return CacheDiskFullError(
        f"{root}: the disk of the shard cache (cache_dir={root}) is full: caching {name} needs "
        f"{human_bytes(size)} and {human_bytes(free)} is free (the cache holds "
        f"{human_bytes(usage)}, cache_limit={shown}); {fix}.",
        root, size, free, cache_limit=limit, name=name)
