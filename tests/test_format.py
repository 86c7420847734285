"""Packed dataset format: manifest, index, and both backends' readers (threads, fork, errors)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fastloader.errors import DatasetError, DatasetNotFoundError
from fastloader.format.dataset import PackedDataset
from fastloader.format.manifest import Codec, Manifest, read_manifest
from fastloader.format.open import open_dataset
from fastloader.pack.pipeline.tree import pack
from treegen import CLASSES

SUFFIX = {"lmdb": ".lmdb", "hdf5": ".h5"}
PILLOW_CODEC = {"JPEG": Codec.JPEG, "PNG": Codec.PNG, "GIF": Codec.GIF, "BMP": Codec.BMP}
PILLOW_CODEC["WEBP"] = Codec.WEBP


pytestmark = pytest.mark.native_neutral


@pytest.fixture(scope="module", params=["lmdb", "hdf5"])
def packed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           mixed_tree: tuple[Path, dict[str, bytes]]):
    """(dataset path, relpath -> original bytes) for the mixed tree, small shards."""
    src, written = mixed_tree
    dst = tmp_path_factory.mktemp(f"mixed-{request.param}") / f"out{SUFFIX[request.param]}"
    pack(src, dst, workers=1, shard_size=8000)
    return dst, written


def test_round_trip_is_byte_exact_with_labels_shapes_and_codecs(packed) -> None:
    dst, written = packed
    with open_dataset(dst) as ds:
        assert len(ds) == len(written) == len(ds.paths)
        assert ds.classes == CLASSES
        assert ds.backend == ("lmdb" if dst.suffix == ".lmdb" else "hdf5")
        assert len(ds.manifest.shards) > 1  # shard_size forced several shards
        assert sorted(ds.paths) == sorted(written)
        assert ds.labels.dtype == np.int64 and ds.shapes.shape == (len(ds), 2)
        for i, relpath in enumerate(ds.paths):
            record, label = ds[i]
            assert isinstance(record, memoryview)
            assert bytes(record) == written[relpath], relpath
            assert label == CLASSES.index(relpath.split("/")[0])
            assert isinstance(label, int)
            with Image.open(io.BytesIO(written[relpath])) as image:
                assert tuple(ds.shapes[i]) == (image.height, image.width), relpath
                assert ds.codecs[i] == PILLOW_CODEC[image.format], relpath
            assert int(ds.crc32s[i]) == zlib.crc32(written[relpath])
            assert bytes(ds.record(i, verify=True)) == written[relpath]


def test_order_and_describe_name_shard_source_and_root(packed) -> None:
    dst, _ = packed
    with open_dataset(dst) as ds:
        # ImageFolder order: by class, then folder, then file name.
        cat = [p for p in ds.paths if p.startswith("cat/")]
        assert cat[-1] == "cat/nested/deeper/progressive.jpg"
        text = ds.describe(3)
        assert ds.paths[3] in text and ds.shard_file(3) in text and str(ds.root) in text
        assert ds.path(3) == ds.paths[3]


def test_bad_indexes_raise_clear_errors(packed) -> None:
    dst, _ = packed
    with open_dataset(dst) as ds:
        for bad in (-1, len(ds), 10**9):
            with pytest.raises(IndexError, match=f"index {bad} is out of range"):
                ds[bad]
        with pytest.raises(TypeError, match="integer"):
            ds["a"]  # type: ignore[index]
        assert ds[np.int64(0)][1] == ds[0][1]


def test_missing_or_incomplete_dataset_names_path_and_fix(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match=r"nope\.lmdb.*packdata"):
        open_dataset(tmp_path / "nope.lmdb")
    (tmp_path / "half.lmdb").mkdir()
    with pytest.raises(DatasetNotFoundError, match=r"half\.lmdb has no manifest\.json"):
        read_manifest(tmp_path / "half.lmdb")
    (tmp_path / "file.h5").write_text("x")
    with pytest.raises(DatasetNotFoundError, match="is a file"):
        open_dataset(tmp_path / "file.h5")


def test_manifest_json_round_trip_and_rejects_unknown_versions(packed) -> None:
    dst, _ = packed
    manifest = read_manifest(dst)
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert manifest.num_samples == sum(s.count for s in manifest.shards)
    assert all(len(s.sha256) == 64 and s.bytes > 0 for s in manifest.shards)
    newer = manifest.to_json().replace(f'"version": {manifest.version}', '"version": 99')
    assert newer != manifest.to_json()
    with pytest.raises(DatasetError, match="upgrade fastloader"):
        Manifest.from_json(newer)
    with pytest.raises(DatasetError, match="not valid JSON"):
        Manifest.from_json("{")
    with pytest.raises(DatasetError, match="not a fastloader manifest"):
        Manifest.from_json('{"format": "other"}')


def test_codec_from_pillow_names() -> None:
    assert Codec.from_pillow("JPEG") is Codec.JPEG
    assert Codec.from_pillow("MPO") is Codec.JPEG
    assert Codec.from_pillow("WEBP") is Codec.WEBP
    assert Codec.from_pillow("XYZ") is Codec.UNKNOWN
    assert Codec.from_pillow(None) is Codec.UNKNOWN


def _expected(ds: PackedDataset) -> list[int]:
    return [int(c) for c in ds.crc32s]


def test_reads_from_many_threads_at_once(packed) -> None:
    dst, _ = packed
    with open_dataset(dst) as ds:
        expected = _expected(ds)
        order = list(range(len(ds))) * 20

        def read(i: int) -> bool:
            return zlib.crc32(ds.record(i)) == expected[i]

        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(read, order))


def test_reads_in_a_forked_child_after_the_parent_read(packed) -> None:
    dst, _ = packed
    ds = open_dataset(dst)
    first = bytes(ds.record(0))  # parent opens its handles before the fork
    pid = os.fork()
    if pid == 0:  # child: exit status says whether every record read back intact
        ok = all(zlib.crc32(ds.record(i)) == int(ds.crc32s[i]) for i in range(len(ds)))
        os._exit(0 if ok and bytes(ds.record(0)) == first else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert bytes(ds.record(0)) == first  # the parent still reads after the child is gone
    ds.close()


# Run in a fresh interpreter: this suite's own process carries other libraries' threads by
# then (fsspec's IO loop, tqdm's monitor, Ray's and Lightning's), and a fork while one of them
# holds a lock can hang the child whatever the dataset does. What is checked is fastloader's
# part: a dataset opened and read before fork() reads right in the forked workers (the shard
# handles reopened after the fork), and after pickling (what a spawned worker receives).
_FORK_CHECK = """
import multiprocessing, os, pickle, sys, zlib
from fastloader.format.open import open_dataset

ds = open_dataset(sys.argv[1])

def crc(i):
    return zlib.crc32(ds.record(i)), os.getpid()

ds.record(1)
with multiprocessing.get_context("fork").Pool(2) as pool:
    results = pool.map(crc, range(len(ds)))
assert [c for c, _ in results] == [int(c) for c in ds.crc32s], "forked reads differ"
assert {pid for _, pid in results} - {os.getpid()}, "no worker read"
clone = pickle.loads(pickle.dumps(ds))
assert bytes(clone.record(2)) == bytes(ds.record(2)), "the pickled copy reads otherwise"
clone.close()
ds.close()
print("ok")
"""


def test_reads_from_a_fork_pool_and_after_pickling(packed) -> None:
    dst, _ = packed
    done = subprocess.run([sys.executable, "-c", _FORK_CHECK, str(dst)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_dataset_freed_while_another_opens_does_not_deadlock(
        packed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """lmdb.open runs Python code while the open table is locked; garbage collection there may
    free a loader, whose dataset releases its environments on the same thread."""
    import threading

    from fastloader.format import lmdb as lmdb_reader

    path, _ = packed
    if path.suffix != ".lmdb":
        pytest.skip("the LMDB reader's table of open environments")
    other = tmp_path / path.name
    shutil.copytree(path, other)
    first = open_dataset(path)
    opening = lmdb_reader._open_env

    def open_while_freeing(shard: Path) -> object:
        first.close()  # what a collected loader's finalizer does at this point
        return opening(shard)

    monkeypatch.setattr(lmdb_reader, "_open_env", open_while_freeing)
    opened: list[PackedDataset] = []
    worker = threading.Thread(target=lambda: opened.append(open_dataset(other)), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "opening a dataset deadlocked on the open table's lock"
    assert len(opened) == 1 and len(opened[0]) == len(first)
    opened[0].close()


def test_record_outside_its_shard_is_refused_at_open(packed, tmp_path: Path) -> None:
    dst, _ = packed
    copy = tmp_path / dst.name
    shutil.copytree(dst, copy)
    offsets = np.load(copy / "index" / "offset.npy", allow_pickle=False).copy()
    offsets[4] = 10**12  # no such key / beyond the end of the shard
    np.save(copy / "index" / "offset.npy", offsets, allow_pickle=False)
    # The edit is caught when the dataset opens (sha256 of the index file), before any read;
    # tests/test_hostile_format.py also re-signs such edits to reach the range checks.
    with pytest.raises(DatasetError, match=r"offset.npy.*sha256"):
        open_dataset(copy)


def test_closed_dataset_and_unknown_field(packed) -> None:
    dst, _ = packed
    ds = open_dataset(dst)
    assert ds.field("label").tolist() == ds.labels.tolist()
    with pytest.raises(DatasetError, match="no index field 'tiles'"):
        ds.field("tiles")
    ds.close()
    with pytest.raises(DatasetError, match="closed"):
        ds.record(0)


def test_two_datasets_on_one_file_outlive_each_other(packed) -> None:
    """Two open datasets of one folder share each LMDB environment (LMDB allows one a process
    and file): closing one leaves the other reading, in either order."""
    dst, _ = packed
    for first_closed in (0, 1):
        pair = [open_dataset(dst), open_dataset(dst)]
        want = bytes(pair[0].record(0))
        assert bytes(pair[1].record(0)) == want
        pair[first_closed].close()
        other = pair[1 - first_closed]
        assert bytes(other.record(0)) == want
        assert bytes(other.record(len(other) - 1)) == bytes(other.record(len(other) - 1))
        other.close()
    again = open_dataset(dst)  # the environment was released: a fresh one opens
    assert bytes(again.record(0)) == want
    again.close()
