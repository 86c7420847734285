"""Damaged and hostile packed datasets: truncated, missing or replaced shards, escaping paths,
edited index arrays, malformed manifests. Each gives one FastloaderError naming the file, at
open where it can be known then; none crashes the process or hangs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastloader.errors import CorruptRecordError, DatasetError, FastloaderError
from fastloader.format.open import open_dataset
from fastloader.pack.cli.main import main
from fastloader.pack.maintain.verify import verify
from fastloader.pack.pipeline.tree import pack
from treegen import make_flat_tree

SUFFIX = {"lmdb": ".lmdb", "hdf5": ".h5"}
pytestmark = pytest.mark.timeout(120)  # a FIFO or a SIGBUS must fail a test, never hang it


@pytest.fixture(scope="module", params=["lmdb", "hdf5"])
def packed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small dataset of 3 classes in several shards."""
    root = tmp_path_factory.mktemp(f"hostile-{request.param}")
    make_flat_tree(root / "src", classes=3, per_class=6, size=48)
    dst = root / f"d{SUFFIX[request.param]}"
    pack(root / "src", dst, workers=1, shard_size=6000)
    return dst


@pytest.fixture
def copy(packed: Path, tmp_path: Path) -> Path:
    """A private copy of the dataset to damage."""
    target = tmp_path / packed.name
    shutil.copytree(packed, target)
    return target


def _manifest(root: Path) -> dict[str, Any]:
    return json.loads((root / "manifest.json").read_text())


def _write_manifest(root: Path, raw: dict[str, Any]) -> None:
    (root / "manifest.json").write_text(json.dumps(raw))


def edit_field(root: Path, name: str, edit: Any, resign: bool) -> None:
    """Apply edit(array) to index field `name`; resign=True also updates its sha256 in the
    manifest, as a consistent forger would, so the range checks behind it are reached."""
    path = root / "index" / f"{name}.npy"
    array = np.load(path, allow_pickle=False).copy()
    edit(array)
    np.save(path, array, allow_pickle=False)
    if resign:
        raw = _manifest(root)
        raw["fields"][name]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        _write_manifest(root, raw)


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter (a SIGBUS there shows as returncode -7, not a crash
    of the test run)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=100)


# -- item 1: a truncated shard -----------------------------------------------------------------

@pytest.mark.heavy
def test_truncated_shard_is_refused_by_verify_and_loader_without_sigbus(copy: Path) -> None:
    last = sorted(copy.glob("shard-*"))[-1]
    os.truncate(last, last.stat().st_size - 4096)  # an interrupted copy
    run = _run("""
        import sys
        from fastloader.pack.cli.main import main
        sys.exit(main(["verify", sys.argv[1]]))
    """, str(copy))
    assert run.returncode == 1, (run.returncode, run.stderr)  # not -7 (SIGBUS)
    assert f"{last.name!r}): {last.stat().st_size} bytes on disk" in run.stdout
    run = _run("""
        import sys
        import fastloader
        from fastloader.errors import DatasetError
        try:
            loader = fastloader.FastLoader(sys.argv[1], batch_size=4, on_error="skip",
                                           device="cpu", num_threads=1)
            for _ in loader:
                pass
        except DatasetError as exc:
            print("refused:", exc)
    """, str(copy))
    assert run.returncode == 0, (run.returncode, run.stderr)
    assert "refused:" in run.stdout and last.name in run.stdout and "truncated" in run.stdout


# -- item 4: paths in manifest.json ------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "index/../../x.npy",
                                  "./shard", "a\\b", ""])
def test_manifest_paths_must_stay_inside_the_dataset(copy: Path, name: str) -> None:
    raw = _manifest(copy)
    raw["shards"][0]["file"] = name
    _write_manifest(copy, raw)
    with pytest.raises(DatasetError, match="not a plain relative path inside"):
        open_dataset(copy)
    with pytest.raises(DatasetError, match="not a plain relative path inside"):
        verify(copy)


def test_index_file_through_a_symlink_out_of_the_dataset_is_refused(copy: Path,
                                                                    tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(copy / "index" / "label.npy", outside / "label.npy")
    (copy / "index" / "label.npy").symlink_to(outside / "label.npy")
    with pytest.raises(DatasetError, match="outside the dataset folder"):
        open_dataset(copy)
    report = verify(copy)
    assert not report.ok and any("outside the dataset folder" in p for p in report.problems)


def test_fifo_in_place_of_a_shard_or_index_file_never_hangs(copy: Path) -> None:
    shard = sorted(copy.glob("shard-*"))[0]
    shard.unlink()
    os.mkfifo(shard)
    with pytest.raises(DatasetError, match="not a regular file"):
        open_dataset(copy)
    assert main(["verify", str(copy)]) == 1
    label = copy / "index" / "label.npy"
    label.unlink()
    os.mkfifo(label)
    with pytest.raises(DatasetError, match="not a regular file"):
        open_dataset(copy)
    assert not verify(copy).ok


# -- item 5: index arrays ----------------------------------------------------------------------

def test_edited_label_file_is_caught_by_its_sha256(copy: Path) -> None:
    edit_field(copy, "label", lambda a: a.__setitem__(0, -3), resign=False)
    with pytest.raises(DatasetError, match=r"label.npy.*sha256"):
        open_dataset(copy)


@pytest.mark.parametrize(("name", "value", "rule"), [
    ("label", -3, "0 <= label"),
    ("label", 3, "0 <= label < 3"),
    ("shard", 999, "lie in the shard"),
    ("shard", -1, "lie in the shard"),
    ("offset", -5, "(LMDB key|offset \\+ length)"),
    ("offset", 10**12, "(LMDB key|offset \\+ length)"),
    ("length", 0, "0 < length"),
    ("length", 10**9, "0 < length"),
    ("codec", 200, "codec"),
])
def test_resigned_out_of_range_index_values_are_refused_at_open(
    copy: Path, name: str, value: int, rule: str
) -> None:
    edit_field(copy, name, lambda a: a.__setitem__(2, value), resign=True)
    with pytest.raises(DatasetError, match=rf"{name}.*{rule}.*record 2"):
        open_dataset(copy)


def test_resigned_index_with_another_dtype_is_refused(copy: Path) -> None:
    path = copy / "index" / "label.npy"
    np.save(path, np.load(path).astype(np.float64))
    raw = _manifest(copy)
    raw["fields"]["label"] |= {"dtype": "float64",
                               "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    _write_manifest(copy, raw)
    with pytest.raises(DatasetError, match="the format stores int64"):
        open_dataset(copy)


# -- item 6: a flipped byte inside a record ----------------------------------------------------

def _flip_record_byte(root: Path, index: int) -> None:
    with open_dataset(root) as ds:
        record = bytes(ds.record(index))
        shard = root / ds.shard_file(index)
    blob = bytearray(shard.read_bytes())
    where = blob.find(record)
    assert where >= 0 and blob.find(record, where + 1) < 0
    blob[where + len(record) // 2] ^= 0x55
    shard.write_bytes(bytes(blob))


def test_flipped_record_byte_is_caught_on_read_and_skipped(copy: Path) -> None:
    import fastloader

    _flip_record_byte(copy, 5)
    with open_dataset(copy) as ds:
        bytes(ds.record(5))  # the raw read does not check...
        ds.verify_records = True
        with pytest.raises(CorruptRecordError, match=r"record 5 .*crc32"):
            ds.record(5)  # ...a verifying one does
    with fastloader.FastLoader(copy, batch_size=6, device="cpu", num_threads=1,
                               transforms=[fastloader.Resize((16, 16))],
                               verify_records=True) as loader, \
            pytest.raises(CorruptRecordError, match="crc32"):
        list(loader)
    with fastloader.FastLoader(copy, batch_size=6, device="cpu", num_threads=1,
                               transforms=[fastloader.Resize((16, 16))],
                               verify_records=True, on_error="skip") as loader:
        assert sum(len(labels) for _, labels in loader) == 18
        assert loader.stats().skipped == 1
    with fastloader.FastLoader(copy, batch_size=6, device="cpu", num_threads=1,
                               transforms=[fastloader.Resize((16, 16))],
                               on_error="skip") as loader:  # the default: not checked
        assert sum(len(labels) for _, labels in loader) == 18  # decoded as the bytes say
        assert not loader.dataset.verify_records


# -- item 8: clear errors instead of tracebacks ------------------------------------------------

def test_missing_zero_byte_and_garbage_shards_fail_naming_the_file(copy: Path) -> None:
    import fastloader

    def loader(on_error: str = "skip") -> Any:
        return fastloader.FastLoader(copy, on_error=on_error, device="cpu", batch_size=6,
                                     transforms=[fastloader.Resize((16, 16))],
                                     verify_records=True)

    shard = sorted(copy.glob("shard-*"))[1]
    original = shard.read_bytes()
    shard.unlink()
    with pytest.raises(DatasetError, match=rf"{shard.name}.*No such file"):
        loader()
    shard.write_bytes(b"")
    with pytest.raises(DatasetError, match=rf"{shard.name}.* 0 bytes on disk"):
        loader()
    garbage = bytes(range(256)) * (len(original) // 256) + original[: len(original) % 256]
    shard.write_bytes(garbage)
    if copy.suffix == ".lmdb":  # LMDB reads its header at open
        with pytest.raises(DatasetError, match=rf"{shard.name} is not a readable LMDB shard"):
            loader()
    else:  # HDF5 records are read at their stored offset: each fails its crc32
        with loader("raise") as running, pytest.raises(FastloaderError, match="crc32"):
            list(running)
    assert not verify(copy).ok


@pytest.mark.parametrize(("key", "value", "message"), [
    ("version", 0, "format version 0"),
    ("version", True, "format version True"),
    ("version", 3, "upgrade fastloader"),
    ("classes", 5, "classes is 5"),
    ("classes", [1, 2], "classes is"),
    ("num_samples", -1, "num_samples"),
    ("num_samples", "18", "num_samples"),
    ("shards", {"a": 1}, "shards must be a list"),
    ("fields", [], "fields an object"),
    ("options", 3, "options is int"),
])
def test_malformed_manifest_entries_raise_one_dataset_error(
    copy: Path, key: str, value: Any, message: str
) -> None:
    raw = _manifest(copy)
    raw[key] = value
    _write_manifest(copy, raw)
    with pytest.raises(DatasetError, match=message):
        open_dataset(copy)
    with pytest.raises(DatasetError, match=message):
        verify(copy)
    assert main(["verify", str(copy)]) == 2


@pytest.mark.parametrize(("entry", "key", "value"), [
    ("shards", "count", True), ("shards", "bytes", -1), ("shards", "start", "0"),
    ("shards", "data_offset", -4), ("fields", "shape", [-1]), ("fields", "dtype", "object"),
])
def test_malformed_shard_and_field_entries(copy: Path, entry: str, key: str, value: Any) -> None:
    raw = _manifest(copy)
    target = raw["shards"][0] if entry == "shards" else raw["fields"]["label"]
    target[key] = value
    _write_manifest(copy, raw)
    with pytest.raises(DatasetError):
        open_dataset(copy)


def test_deeply_nested_or_binary_manifest(copy: Path) -> None:
    (copy / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DatasetError, match="nests too deeply"):
        open_dataset(copy)
    (copy / "manifest.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DatasetError, match="UTF-8"):
        open_dataset(copy)


def test_loader_arguments_that_cannot_work_fail_at_construction(packed: Path) -> None:
    import fastloader

    with pytest.raises(FastloaderError, match="batch_size"):
        fastloader.FastLoader(packed, batch_size=2**40, device="cpu",
                              transforms=[fastloader.Resize((16, 16))])
    with pytest.raises(FastloaderError, match="at most 65535"):
        fastloader.RandomResizedCrop(100000)
    with pytest.raises(FastloaderError, match="num_threads"):
        fastloader.FastLoader(packed, num_threads=10**6, device="cpu",
                              transforms=[fastloader.Resize((16, 16))])
    with pytest.raises(FastloaderError, match="normalize"):
        fastloader.FastLoader(packed, normalize=((0.5,) * 3, (float("nan"), 0.2, 0.2)),
                              device="cpu")
    with pytest.raises(FastloaderError, match="verify_records"):
        fastloader.FastLoader(packed, verify_records="yes", device="cpu")
