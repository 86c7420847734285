"""A full disk gets a clear answer (issue 47, items 9 and 10), on a small tmpfs each test
mounts: packdata and pack() refuse a source clearly larger than the free space before they
start, a disk that fills mid-pack is a one-line error (packdata) or a typed error (pack())
naming the folder, the room needed and free and that resume finishes the pack, --resume after
the disk grows gives the dataset a pack with room gives, and a loader whose cache_dir fills
fails at once naming cache_dir, its free space and cache_limit.

Mounting needs root (the tests run as root here); elsewhere each test skips, saying why.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from fastloader.errors import (
    CacheDiskFullError,
    DatasetError,
    DiskFullError,
    PackDiskFullError,
    PackError,
)
from imagegen import encode

# tmpfs mounts, packdata processes, an HTTP server
pytestmark = pytest.mark.heavy

SHARD = "100K"  # five shards of ~110 KB (LMDB) from the tree below
SMALL = "256k"  # holds two of them: the pack fails on its third shard


@contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at folder while the block runs (skips where it cannot)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; these tests run as root in CI")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): "
                    f"{done.stderr.strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def grow(folder: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 classes x 20 noise JPEGs of 96x96 (~11.5 KB each, ~460 KB): hardly compressible."""
    root = tmp_path_factory.mktemp("full") / "src"
    rng = np.random.default_rng(0)
    for k in range(2):
        (root / f"c{k}").mkdir(parents=True)
        for i in range(20):
            pixels = rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)
            (root / f"c{k}" / f"i{i:03d}.jpg").write_bytes(encode(pixels, quality=95))
    return root


def packdata(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", *map(str, argv),
                           "--quiet", "--workers", "2", "--shard-size", SHARD],
                          capture_output=True, text=True, timeout=120)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """packdata's error: one line on stderr, no traceback, a non-zero exit code."""
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("packdata: error: "), done.stderr
    return lines[0]


SIZE = r"\d+(\.\d+)? (B|KiB|MiB|GiB)"


def test_packdata_refuses_a_source_larger_than_the_free_space_before_it_starts(
        tree: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", SMALL) as disk:
        line = one_line(packdata(tree, disk / "d.lmdb"))
        assert str(disk) in line
        assert re.search(rf"needs about {SIZE}", line) and re.search(rf"{SIZE} is free", line)
        assert "--skip-space-check" in line and "skip_space_check" not in line
        assert list(disk.iterdir()) == []  # refused before anything was written


def test_pack_refuses_a_source_larger_than_the_free_space_with_a_typed_error(
        tree: Path, tmp_path: Path) -> None:
    from fastloader.pack.api import pack

    with tmpfs(tmp_path / "disk", SMALL) as disk:
        with pytest.raises(PackDiskFullError) as info:
            pack(tree, disk / "d.h5", workers=2, quiet=True, shard_size=100_000)
        err = info.value
        assert isinstance(err, PackError) and isinstance(err, DiskFullError)
        assert err.folder == disk and err.dst == disk / "d.h5" and not err.kept
        assert err.needed is not None and err.needed > 1.1 * err.free
        assert err.free <= 256 << 10
        assert "skip_space_check=True" in str(err) and str(disk) in str(err)
        assert list(disk.iterdir()) == []


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_packdata_full_disk_mid_pack_is_one_line_naming_folder_sizes_and_resume(
        tree: Path, tmp_path: Path, suffix: str) -> None:
    with tmpfs(tmp_path / "disk", SMALL) as disk:
        line = one_line(packdata(tree, disk / f"d{suffix}", "--skip-space-check"))
        assert "disk is full" in line and str(disk) in line
        assert re.search(rf"needs about {SIZE} more", line) and re.search(rf"{SIZE} is free",
                                                                           line)
        assert "--resume" in line and "resume=True" not in line
        staging = disk / f".d{suffix}.partial"
        assert any((staging / "journal").glob("*.json"))  # finished shards kept for --resume
        assert not list((staging / "journal").glob("*.tmp-*"))  # the failed shard's file gone


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_pack_full_disk_mid_pack_raises_the_typed_error_with_its_facts(
        tree: Path, tmp_path: Path, suffix: str) -> None:
    from fastloader.pack.api import pack

    with tmpfs(tmp_path / "disk", SMALL) as disk:
        with pytest.raises(PackDiskFullError) as info:
            pack(tree, disk / f"d{suffix}", workers=2, quiet=True, shard_size=100 << 10,
                 skip_space_check=True)
        err = info.value
        assert isinstance(err, PackError) and isinstance(err, OSError)
        assert err.folder == disk and err.kept and err.staging == disk / f".d{suffix}.partial"
        assert err.needed is not None and 0 < err.free < err.needed
        assert "resume=True" in str(err) and "--resume" not in str(err)
        assert "\n" not in str(err)


def _dataset_bytes(root: Path) -> dict[str, bytes]:
    """Every file of a packed dataset; the manifest without created_at (when the commit ran:
    the one entry two packs of the same source at different times do not share)."""
    files = {p.relative_to(root).as_posix(): p.read_bytes()
             for p in sorted(root.rglob("*")) if p.is_file()}
    manifest = json.loads(files.pop("manifest.json"))
    assert manifest.pop("created_at")
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_resume_after_the_disk_grows_gives_the_dataset_packed_with_room(
        tree: Path, tmp_path: Path, suffix: str) -> None:
    (tmp_path / "room").mkdir()
    assert packdata(tree, tmp_path / "room" / f"d{suffix}").returncode == 0
    with tmpfs(tmp_path / "disk", SMALL) as disk:
        line = one_line(packdata(tree, disk / f"d{suffix}", "--skip-space-check"))
        assert "rerun with --resume" in line
        grow(disk, "64m")
        done = packdata(tree, disk / f"d{suffix}", "--resume")
        assert done.returncode == 0, done.stderr
        packed = _dataset_bytes(disk / f"d{suffix}")
    expected = _dataset_bytes(tmp_path / "room" / f"d{suffix}")
    assert sorted(packed) == sorted(expected)
    assert [name for name in expected if packed[name] != expected[name]] == []


def _cached_pass(url: str, cache_dir: Path, limit: str | None) -> int:
    """One pass of a loader over url with its cache in cache_dir: the records read."""
    from fastloader.loader.loader import FastLoader
    from helpers import train_transforms

    loader = FastLoader(url, batch_size=4, num_threads=1, transforms=train_transforms(),
                        cache_dir=cache_dir, cache_limit=limit, shuffle_window=1,
                        prefetch_shards=1)
    try:
        return sum(len(labels) for _, labels in loader)
    finally:
        loader.close()


@pytest.mark.parametrize("limit", [None, "1GB"])
def test_a_full_cache_disk_fails_at_once_naming_cache_dir_free_and_limit(
        served, limit: str | None) -> None:
    """The served dataset (~155 KB) on a 224 KiB tmpfs: the index and the first shards fit,
    a later shard does not. No limit, or one larger than the disk: the error says which
    cache_limit would have kept the cache on its disk, and that limit does."""
    pytest.importorskip("aiohttp", reason="aiohttp (fsspec's http://) is not installed")
    url, state, tmp = served
    with tmpfs(tmp / "cachedisk", "224k") as disk:
        with pytest.raises(CacheDiskFullError) as info:
            _cached_pass(url, disk / "cache", limit)
        # the loader's producer re-raises it with its type and facts, naming stage and batch
        err = info.value
        text = str(err)
        assert "[fastloader producer: stage" in text
        assert isinstance(err, DatasetError) and isinstance(err, DiskFullError)
        assert state["gets"][f"data.lmdb/{err.name.rsplit('/', 1)[1]}"] == 1  # no retries
        assert "check the network" not in text
        assert f"cache_dir={disk / 'cache'}" in text and "cache_limit=" in text
        assert re.search(rf"{SIZE} is free", text)
        assert err.cache_dir == disk / "cache" and err.free < err.needed
        if limit is None:
            assert err.cache_limit is None and "no cache_limit is set" in text
        else:
            assert err.cache_limit == 10**9 and "more than this disk leaves the cache" in text
        suggested = re.search(rf'cache_limit="({SIZE})" \(it would', text)
        assert suggested, text
        assert _cached_pass(url, disk / "cache", suggested.group(1)) == 32
