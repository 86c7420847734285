"""The packer's memory does not grow by a Python object per file: the scan's listing, the
shard plan and what the commit gathers from the parts are compact arrays (bytes counted with
tracemalloc, never timed), and hostile names (not UTF-8, newlines, very long) are still
listed, packed and skipped as before."""

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

from fastloader.format.fields import FieldSpec
from fastloader.format.index import write_index
from fastloader.format.open import open_dataset
from fastloader.pack.pipeline.samples import importer_plan
from fastloader.pack.pipeline.tree import pack
from fastloader.pack.sources.formats.image_folder import TreeSamples, open_tree
from fastloader.pack.sources.listing import Listing, SourceFile
from fastloader.pack.sources.scan import scan
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE, Prepared
from fastloader.pack.sources.values import PreparedSample
from fastloader.pack.staging.build import build_part
from fastloader.pack.staging.commit import _sample_index, check_parts, commit
from fastloader.pack.staging.items import items_of
from fastloader.pack.staging.journal import Staging
from fastloader.pack.staging.part import identity
from fastloader.pack.staging.plan import ShardPlan, TaskSettings
from imagegen import encode, photo_like

FILES = 20_000
# Bytes a file may cost. The compact listing is ~28 bytes plus the path (~22 here); the old
# one, a frozen dataclass with a str and two ints per file, was ~290.
LISTING_BOUND = 100
# The shard plan over a Listing: its arrays as they are, labels widened to int64, each file's
# 16-byte key and the cut's cumulative sizes (~40 bytes a file); a str, bytes or SourceFile
# per file is ~60-290.
PLAN_PEAK_BOUND = 48
# The commit's peak per file: the parts' index arrays and the index columns built from them
# (numbers and path bytes: 91 bytes measured); a str path per sample makes it ~173.
COMMIT_BOUND = 150


pytestmark = pytest.mark.heavy


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


@pytest.mark.native_neutral
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


@pytest.mark.native_neutral
def test_the_shard_plan_reads_the_listing_arrays_without_objects(tmp_path: Path) -> None:
    _empty_files(tmp_path / "src", 20, FILES // 20)
    samples, specs, source = open_tree(str(tmp_path / "src"), DEFAULT_MAX_FILE_SIZE, None)
    plan, held, peak = _traced(lambda: importer_plan(samples, specs, source, None, 4096, False,
                                                     max_files=1000))
    # A Listing's arrays are taken as they are (labels widened to int64): no str, bytes or
    # SourceFile per file, even for a moment.
    assert peak / FILES < PLAN_PEAK_BOUND, f"planning peaked at {peak / FILES:.0f} B a file"
    assert held / FILES < PLAN_PEAK_BOUND, f"the plan adds {held / FILES:.0f} B a file"
    assert len(plan) == FILES and plan.num_shards == FILES // 1000
    listing = samples.listing
    assert [plan.relpath(i) for i in (0, 4321, FILES - 1)] == [
        listing.relpath(i) for i in (0, 4321, FILES - 1)]
    assert plan.labels.tolist() == listing.labels.tolist()
    assert plan.mtimes.tolist() == listing.mtimes.tolist()


def _prepared(k: int) -> Prepared:
    data = k.to_bytes(4, "little") * 3
    return Prepared(data, 8 + k % 7, 8, 1, 0x80000000 + k, None, False)


def _planned(folder: Path, count: int) -> tuple[Staging, ShardPlan, TaskSettings]:
    """A staged plan of count listed files (12 bytes each, 100 classes) and its parts, written
    by build_part from made-up records (no image is decoded: only the commit is measured)."""
    files = Listing.from_files([SourceFile(f"class_{k % 100:03d}/img_{k:06d}.jpg", k % 100,
                                           12, k) for k in range(count)])
    classes = [f"class_{c:03d}" for c in range(100)]
    samples = TreeSamples(files, folder, {"classes": classes, "refused": []})
    specs = [FieldSpec("image", "image"), FieldSpec("label", "int", classes=tuple(classes))]
    plan = importer_plan(samples, specs, {"kind": "imagefolder", "fingerprint": "x"},
                         {"kind": "imagefolder", "src": str(folder)}, 40_000, False)
    identity: dict[str, Any] = {"backend": "lmdb", "shard_size": 40_000, "max_side": None,
                                "quality": 90, "max_file_size": 1 << 30,
                                "fields": plan.fields}  # 3,333 files a shard
    settings = TaskSettings.of(identity)
    staging = Staging(folder / "out.lmdb")
    staging.open(identity, resume=False)
    plan.save(staging.dir)
    for k in range(plan.num_shards):
        made = ((PreparedSample(_prepared(i), {"label": i % 100}, files.relpath(i)), None)
                for i in range(*plan.span(k)))
        build_part(staging.dir, plan, k, settings, items_of(plan, settings), made)
    return staging, plan, settings


def _index_traced(folder: Path, count: int) -> int:
    """Peak bytes of the commit's per-file work: the index gathered from the checked parts and
    written. (check_parts, before it, holds a Part and a hash buffer per shard, not per file.)"""
    folder.mkdir()
    staging, plan, settings = _planned(folder, count)
    try:
        parts = check_parts(staging, plan, identity(items_of(plan, settings), plan))
        specs = items_of(plan, settings).specs
        _, _, peak = _traced(lambda: write_index(
            staging.dir, _sample_index(staging, plan, parts, specs, "lmdb", False)[0]))
    finally:
        staging.release()
    return peak


@pytest.mark.native_neutral
def test_the_commit_builds_the_index_from_arrays(tmp_path: Path) -> None:
    # Two sizes: the growth between them is what the commit holds per file (fixed buffers,
    # such as the paths gathered a block at a time, cancel out).
    small_peak = _index_traced(tmp_path / "small", FILES // 2)
    peak = _index_traced(tmp_path / "big", FILES)
    per_file = (peak - small_peak) / (FILES - FILES // 2)
    # The parts' index arrays and the columns built from them (numpy), never a Python value
    # per sample.
    assert per_file < COMMIT_BOUND, f"the commit's index peaked at {per_file:.0f} B a file"
    staging, plan, settings = _planned(tmp_path / "big", FILES)  # the whole commit, again
    try:
        manifest, held, _ = _traced(lambda: commit(staging, plan, settings, False))
    finally:
        staging.release()
    assert held / FILES < 8, f"the commit still holds {held / FILES:.0f} B a file"
    assert manifest.num_samples == FILES and len(manifest.shards) > 5
    with open_dataset(tmp_path / "big" / "out.lmdb") as ds:
        assert len(ds) == FILES
        assert ds.paths[FILES - 1] == f"class_099/img_{FILES - 1:06d}.jpg"
        assert ds[12345][1] == 45 and bytes(ds[12345][0]) == _prepared(12345).data


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
    manifest = pack(src, dst, workers=workers, skip_bad=True)
    with open_dataset(dst) as ds:
        assert list(ds.paths) == expected  # path_bytes keep the exact file-system bytes
    skipped = json.loads((dst / "skipped.json").read_text())
    assert {os.fsencode(s["path"]): s["reason"] for s in skipped}.keys() == refused.keys()
    assert all(refused[os.fsencode(s["path"])] in s["reason"] for s in skipped)
    assert manifest.stats["files_found"] == len(packed)


@pytest.mark.native_neutral
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
