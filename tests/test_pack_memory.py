"""The packer's memory does not grow by a Python object per file: the scan's listing and the
journaled shards are compact arrays (bytes counted with tracemalloc, never timed), and hostile
names (not UTF-8, newlines, very long) are still listed, packed and skipped as before."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastloader.format.dataset import open_dataset
from fastloader.pack.journal import Staging
from fastloader.pack.listing import Listing, SourceFile
from fastloader.pack.scan import scan
from fastloader.pack.validate import Prepared
from fastloader.pack.write import _ShardBuilder, pack
from imagegen import encode, photo_like

FILES = 20_000
# Bytes a file may cost. The compact listing is ~28 bytes plus the path (~22 here); the old
# one, a frozen dataclass with a str and two ints per file, was ~290.
LISTING_BOUND = 100
# A journaled sample kept for the index: ~37 bytes of numbers plus its path (~30 bytes);
# the old per-sample Python lists (8 columns plus [path, size, mtime]) were ~600.
RECORD_BOUND = 150


def _traced(make: Callable[[], Any]) -> tuple[Any, int, int]:
    """(make()'s result, bytes it still holds, peak bytes while it ran), from tracemalloc."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = make()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, held - before, peak - before


def _empty_files(src: Path, classes: int, per_class: int) -> None:
    """classes x per_class empty .jpg files (the scan only stats them)."""
    for c in range(classes):
        folder = src / f"class_{c:03d}"
        folder.mkdir(parents=True)
        for k in range(per_class):
            os.close(os.open(folder / f"img_{k:06d}.jpg", os.O_WRONLY | os.O_CREAT, 0o644))


def test_the_listing_of_many_files_holds_a_few_dozen_bytes_each(tmp_path: Path) -> None:
    _empty_files(tmp_path / "src", 20, FILES // 20)
    result, held, peak = _traced(lambda: scan(tmp_path / "src"))
    assert len(result.files) == FILES
    assert held / FILES < LISTING_BOUND, f"the listing holds {held / FILES:.0f} bytes a file"
    # The walk holds one class folder's names at a time, not every file's.
    assert peak / FILES < 2 * LISTING_BOUND, f"the scan peaked at {peak / FILES:.0f} B a file"
    listing = result.files
    assert listing[0] == SourceFile("class_000/img_000000.jpg", 0, 0, listing.mtime_ns(0))
    assert listing.relpath(FILES - 1) == "class_019/img_000999.jpg"
    assert listing.labels.tolist() == [k // 1000 for k in range(FILES)]


def _prepared(k: int) -> Prepared:
    data = k.to_bytes(4, "little") * 3
    return Prepared(data, 8 + k % 7, 8, 1, 0x80000000 + k, None, False)


def test_journaled_shards_keep_their_samples_as_arrays(tmp_path: Path) -> None:
    staging = Staging(tmp_path / "out.lmdb")
    staging.open({"test": True}, resume=False)
    try:
        def fill() -> _ShardBuilder:
            builder = _ShardBuilder(staging, "lmdb", 40_000, [], tiled=False)
            for k in range(FILES):
                source = SourceFile(f"class_{k % 100:03d}/img_{k:06d}.jpg", k % 100, 12, k)
                builder.add(source, _prepared(k))
            builder.flush()
            return builder

        builder, held, _ = _traced(fill)
    finally:
        staging.release()
    assert builder.next_sample == FILES and len(builder.records) > 5
    assert held / FILES < RECORD_BOUND, f"journaled shards hold {held / FILES:.0f} B a sample"
    # What they keep is still every sample's index entry, and the journal can resume them.
    reused = staging.reusable_shards(Listing.from_files([
        SourceFile(f"class_{k % 100:03d}/img_{k:06d}.jpg", k % 100, 12, k) for k in range(FILES)
    ]))
    assert sum(r.info.count for r in reused) == FILES
    assert sum(r.consumed_count for r in reused) == FILES


def _hostile_names(src: Path) -> tuple[list[bytes], dict[bytes, str]]:
    """Images under awkward names in class a, and FIFOs under such names; returns (the packed
    relpaths as bytes, the refused relpaths -> a word of their reason)."""
    image = encode(photo_like(16, 20, 3))
    names = [b"plain.jpg", b"latin1_caf\xe9.jpg", b"\xff\xfe not utf-8.jpg",
             b"new\nline.jpg", b"tab\tand space .jpg", b"x" * 250 + b".jpg"]
    folder = os.fsencode(src / "a")
    os.makedirs(folder)
    for name in names:
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(image)
    refused = {b"a/fifo \xff\nname.jpg": "not a regular file"}
    os.mkfifo(os.path.join(os.fsencode(src), b"a/fifo \xff\nname.jpg"))
    return sorted(b"a/" + n for n in names), refused


@pytest.mark.parametrize("workers", [1, 2])
def test_hostile_names_are_listed_packed_and_skipped_as_before(tmp_path: Path,
                                                               workers: int) -> None:
    src = tmp_path / "src"
    packed, refused = _hostile_names(src)
    expected = sorted(os.fsdecode(p) for p in packed)  # the scan's order: str, as before
    listing = scan(src).files
    assert [f.relpath for f in listing] == expected
    blob = listing.path_bytes.tobytes()
    offsets = listing.path_offsets.tolist()
    assert sorted(blob[a:b] for a, b in itertools.pairwise(offsets)) == packed
    dst = tmp_path / "out.lmdb"
    manifest = pack(src, dst, workers=workers)
    with open_dataset(dst) as ds:
        assert list(ds.paths) == expected  # path_bytes keep the exact file-system bytes
    skipped = json.loads((dst / "skipped.json").read_text())
    assert {os.fsencode(s["path"]): s["reason"] for s in skipped}.keys() == refused.keys()
    assert all(refused[os.fsencode(s["path"])] in s["reason"] for s in skipped)
    assert manifest.stats["files_found"] == len(packed)


def test_bench_pack_memory_mode_reports_bytes_per_file(tmp_path: Path) -> None:
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_pack.py"
    out = tmp_path / "pack.jsonl"
    subprocess.run([sys.executable, str(bench), "--memory", "300", "--work", str(tmp_path),
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    rows = [json.loads(line) for line in out.with_name("pack_memory.jsonl").read_text()
            .splitlines()][1:]  # the first line is the environment
    assert [(r["phase"], r["files"]) for r in rows] == [("listing", 300), ("pack", 300)]
    for row in rows:
        assert row["driver_peak_bytes"] >= row["baseline_bytes"] > 0
        assert row["driver_bytes_per_file"] >= 0
    assert rows[1]["worker_peak_bytes"] > 0  # the pool's workers were measured
    assert not (tmp_path / "tiny-300").exists()  # the generated tree is removed
