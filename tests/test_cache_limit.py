"""The shard cache's limit holds for every byte its folder keeps: finished files, their stamps
and downloads in progress, at the moments where the accounting could go wrong."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from fastloader.format.cache import CacheFullError, ShardCache

SIZE = 10_000


pytestmark = pytest.mark.native_neutral


def _disk_bytes(root: Path) -> int:
    """What the folder holds, every file counted (as `du --apparent-size` does)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _writer(size: int, extra: int = 0) -> Any:
    """A download like format/remote.py's stream: write, then check the length it got."""
    def download(out: BinaryIO) -> None:
        out.seek(0)
        out.truncate()
        for start in range(0, size + extra, 4096):
            out.write(b"x" * min(4096, size + extra - start))
        if out.tell() != size:
            raise ValueError(f"downloaded {out.tell()} bytes, expected {size}")
    return download


def test_finished_files_and_their_stamps_stay_under_the_limit(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, limit=2 * SIZE + 60, wait_s=0.2)  # 2 files + 2 stamps: over
    for name in ("a", "b", "c", "d"):
        cache.fetch(name, SIZE, _writer(SIZE))
        cache.unpin(name)  # read and released: evictable
        assert _disk_bytes(tmp_path) <= cache.limit
        assert cache.usage() == _disk_bytes(tmp_path)  # the stamps are counted too
    assert cache.is_verified("d") and not cache.is_verified("a")


def test_a_download_longer_than_its_size_never_writes_past_its_room(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, limit=SIZE + 100, wait_s=0.2)
    seen = []

    def download(out: BinaryIO) -> None:
        try:
            _writer(SIZE, extra=5_000)(out)
        finally:
            seen.append(_disk_bytes(tmp_path))  # the part at its longest

    with pytest.raises(ValueError, match="downloaded 15000 bytes"):  # still told, still fails
        cache.fetch("a", SIZE, download)
    assert seen and max(seen) <= cache.limit
    assert not any(".part-" in p.name for p in tmp_path.rglob("*"))


def test_a_new_download_is_never_taken_for_a_dead_ones_leftovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process reserving room right after this one reserved its part: its clean-up of
    dead downloads must leave the live part (deleting it frees its room twice)."""
    cache = ShardCache(tmp_path, limit=SIZE + SIZE // 2, wait_s=0.3)
    other = ShardCache(tmp_path, limit=cache.limit, wait_s=0.3)  # flocks conflict per open
    reserve = ShardCache._reserve
    outcome: list[str] = []

    def reserve_then_race(self: ShardCache, name: str, size: int) -> Any:
        reserved = reserve(self, name, size)
        if name == "a":  # the moment after this reservation: the other process reserves
            try:
                other.fetch("b", SIZE, _writer(SIZE))
                outcome.append("b downloaded")
            except CacheFullError:
                outcome.append("b waited for room")
        return reserved

    monkeypatch.setattr(ShardCache, "_reserve", reserve_then_race)
    cache.fetch("a", SIZE, _writer(SIZE))
    assert outcome == ["b waited for room"]
    assert _disk_bytes(tmp_path) <= cache.limit


def test_a_part_becomes_its_file_inside_the_accounting_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A count (another process reserving) lists the folder, then stats each name: a rename
    between the two would hide the file from it, and it would fill the room again."""
    cache = ShardCache(tmp_path, limit=3 * SIZE, wait_s=0.2)
    replace = os.replace
    held: list[bool] = []

    def spy(src: Any, dst: Any) -> None:
        if ".part-" in str(src):
            fd = os.open(tmp_path / ".cache.lock", os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(False)
            except BlockingIOError:
                held.append(True)
            finally:
                os.close(fd)
        replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    cache.fetch("a", SIZE, _writer(SIZE))
    assert held == [True]
    assert cache.is_verified("a")
