"""Opening at scale: the index is mapped, not read, and hashed and range-checked once per
version (format/stamps.py); every way of changing it after its stamp is caught at the next open,
before any record is read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastloader import open_dataset
from fastloader.errors import DatasetError
from fastloader.format import index as index_mod
from fastloader.format import integrity, stamps
from fastloader.format.dataset import PackedDataset


@pytest.fixture(autouse=True)
def stamp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stamps go under tmp_path (the seam), never into ~/.cache."""
    folder = tmp_path / "stamps"
    monkeypatch.setattr(stamps, "stamp_folder", lambda: folder)
    return folder


@pytest.fixture
def copy(dataset_path: Path, tmp_path: Path) -> Path:
    target = tmp_path / "data.lmdb"
    shutil.copytree(dataset_path, target)
    return target


class Counts:
    """How often an open hashed an index file, range-checked the index, and how many bytes it
    read from index files through open() (the seam every index read goes through)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.hashed = 0
        self.checked = 0
        self.read = 0
        hash_field, check = index_mod.Mapped.check_sha256, integrity.check_index

        def counted_hash(mapped: Any, *args: Any) -> None:
            self.hashed += 1
            hash_field(mapped, *args)

        def counted_check(*args: Any) -> None:
            self.checked += 1
            check(*args)

        counts = self

        class Counted:
            def __init__(self, handle: Any) -> None:
                self._handle = handle

            def read(self, size: int = -1) -> bytes:
                data = self._handle.read(size)
                counts.read += len(data)
                return data

            def __getattr__(self, name: str) -> Any:
                return getattr(self._handle, name)

            def __enter__(self) -> Counted:
                return self

            def __exit__(self, *exc: object) -> None:
                self._handle.close()

        monkeypatch.setattr(index_mod.Mapped, "check_sha256", counted_hash)
        monkeypatch.setattr(integrity, "check_index", counted_check)

        def counted_open(*args: Any, **kwargs: Any) -> Counted:
            return Counted(open(*args, **kwargs))  # closed by Counted.__exit__

        monkeypatch.setattr(index_mod, "open", counted_open, raising=False)

    def reset(self) -> None:
        self.hashed = self.checked = self.read = 0


def _mapped_from(array: np.ndarray) -> str | None:
    """The file whose shared mapping holds the array's first byte (/proc/self/maps), if any."""
    address = array.__array_interface__["data"][0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            start, stop = (int(v, 16) for v in parts[0].split("-"))
            if start <= address < stop and len(parts) == 6:
                return parts[5].strip()
    return None


def _index_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "index").iterdir())


def test_first_open_checks_and_stamps_later_opens_read_only_headers(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = Counts(monkeypatch)
    with open_dataset(copy) as ds:
        assert not ds.index_trusted
        fields = len(list((copy / "index").glob("*.npy")))  # the core arrays, the label column
        assert fields > len(index_mod.CORE_FIELDS)  # (a tree packs v2: image + label fields)
        assert counts.hashed == fields and counts.checked == 1
        first = [int(v) for v in ds.labels]
    counts.reset()
    with open_dataset(copy) as ds:
        assert ds.index_trusted
        assert counts.hashed == 0 and counts.checked == 0
        # Only the .npy headers were read (each one < 256 bytes): the rows stay on disk ...
        assert counts.read <= 256 * fields < _index_bytes(copy)
        # ... mapped: plain read-only ndarrays over the files' pages, the same values.
        for name, array in [("label", ds.labels), ("length", ds.lengths),
                            ("offset", ds.offsets), ("shard", ds.shard_ids),
                            ("shape", ds.shapes)]:
            assert type(array) is np.ndarray and not array.flags.writeable
            assert _mapped_from(array) == os.path.realpath(copy / "index" / f"{name}.npy")
        assert [int(v) for v in ds.labels] == first
        assert bytes(ds.record(3)) == bytes(ds.record(3, verify=True))


def _flip_in_place(path: Path, keep_mtime: bool) -> None:
    before = path.stat()
    with open(path, "r+b") as handle:  # same inode, same size
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 0x01]))
    if keep_mtime:  # a careful editor sets the mtime back; the ctime still moves
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_mtime_ns == before.st_mtime_ns


def _replace_same_size(path: Path) -> None:
    array = np.load(path)
    array[0] = (int(array[0]) + 1) % 3
    tmp = path.with_name("tmp.npy")
    np.save(tmp, array)
    assert tmp.stat().st_size == path.stat().st_size
    os.replace(tmp, path)  # a new inode


@pytest.mark.parametrize("damage", ["flip in place", "flip, mtime set back",
                                    "replaced, same size"])
def test_an_index_changed_after_its_stamp_is_caught_at_the_next_open(
    copy: Path, damage: str
) -> None:
    with open_dataset(copy) as ds:
        assert not ds.index_trusted
    label = copy / "index" / "label.npy"
    if damage == "replaced, same size":
        _replace_same_size(label)
    else:
        _flip_in_place(label, keep_mtime=damage == "flip, mtime set back")
    with pytest.raises(DatasetError, match=r"label.npy.*fails its sha256 check"):
        open_dataset(copy)


def test_a_resigned_manifest_is_another_version_checked_in_full(copy: Path) -> None:
    with open_dataset(copy) as ds:
        assert not ds.index_trusted
    raw = json.loads((copy / "manifest.json").read_text())
    raw["classes"] = raw["classes"][:2]  # the index files untouched: label 2 is now too big
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match=r"label.*0 <= label < 2.*record 16"):
        open_dataset(copy)


def test_a_forged_index_with_a_resigned_manifest_is_range_checked(copy: Path) -> None:
    with open_dataset(copy) as ds:
        assert not ds.index_trusted
    path = copy / "index" / "label.npy"
    array = np.load(path)
    array[2] = 7  # out of range, of the same size; the forger re-signs the manifest
    np.save(path, array)
    raw = json.loads((copy / "manifest.json").read_text())
    raw["fields"]["label"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match=r"label.*0 <= label < 3.*record 2"):
        open_dataset(copy)


def test_a_stamp_vouches_for_its_own_files_only(copy: Path, tmp_path: Path,
                                                stamp_dir: Path) -> None:
    with open_dataset(copy) as ds:
        assert not ds.index_trusted
    elsewhere = tmp_path / "moved.lmdb"
    shutil.copytree(copy, elsewhere)  # the same bytes, other files: checked once again
    with open_dataset(elsewhere) as ds:
        assert not ds.index_trusted
    with open_dataset(elsewhere) as ds:
        assert ds.index_trusted
    for stamp in stamp_dir.glob("*/*.json"):  # an edited stamp is no stamp
        stamp.write_text(stamp.read_text().replace('"files": {', '"files": {"x": [1], '))
    with open_dataset(copy) as ds:
        assert not ds.index_trusted


def _stamps(folder: Path) -> dict[str, set[str]]:
    """Each dataset's stamp folder -> the names in it."""
    return {entry.name: set(os.listdir(entry)) for entry in folder.iterdir() if entry.is_dir()}


def _restamp(root: Path) -> None:
    """Another version of the dataset: other manifest bytes, the same meaning."""
    manifest = root / "manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()), indent=1))


def test_writing_a_stamp_removes_the_datasets_other_versions(copy: Path,
                                                             stamp_dir: Path) -> None:
    with open_dataset(copy):
        pass
    ((folder, first),) = _stamps(stamp_dir).items()
    assert {name.partition(".")[2] for name in first} == {"json", "shapes.npy", "json.lock"}
    _restamp(copy)
    new_sha = hashlib.sha256((copy / "manifest.json").read_bytes()).hexdigest()
    for tmp, age in ((f"{new_sha}.json.1.tmp", 2 * stamps.STALE_S), ("y.json.2.tmp", 0)):
        (stamp_dir / folder / tmp).write_bytes(b"")  # dead writers': the new version's, another's
        when = time.time() - age
        os.utime(stamp_dir / folder / tmp, (when, when))
    with open_dataset(copy) as ds:
        assert not ds.index_trusted
    (second,) = _stamps(stamp_dir).values()  # still one folder, with the new version only
    assert len(second) == 3 and not first & second  # the .tmp files too
    with open_dataset(copy) as ds:
        assert ds.index_trusted


def test_the_daily_sweep_removes_stamps_that_can_never_match(copy: Path, tmp_path: Path,
                                                             stamp_dir: Path) -> None:
    gone, third = tmp_path / "gone.lmdb", tmp_path / "third.lmdb"
    for root in (gone, third):
        shutil.copytree(copy, root)
    for root in (copy, gone):
        with open_dataset(root):
            pass
    shutil.rmtree(gone)
    (stamp_dir / f"{'ab' * 64}.json").write_text('{"version": 1, "files": {}}')  # version 1
    day_ago = os.stat(stamp_dir / stamps.SWEPT).st_mtime - 2 * stamps.SWEEP_EVERY_S
    for name, age in (("died", day_ago), ("starting", None)):  # no stamp: a writer's folder
        (stamp_dir / name).mkdir()
        (stamp_dir / name / "x.json.lock").write_bytes(b"")
        if age:
            os.utime(stamp_dir / name, (age, age))
    before = set(os.listdir(stamp_dir))
    with open_dataset(third):  # a write within the day removes its own dataset's versions only
        pass
    assert before < set(os.listdir(stamp_dir))
    os.utime(stamp_dir / stamps.SWEPT, (day_ago, day_ago))
    _restamp(third)
    with open_dataset(third):  # a day later a write sweeps
        pass
    assert len(_stamps(stamp_dir)) == 3  # copy's, third's and the starting writer's
    assert "starting" in _stamps(stamp_dir) and "died" not in _stamps(stamp_dir)
    assert not [p for p in stamp_dir.iterdir() if p.is_file() and p.name != stamps.SWEPT]
    assert os.stat(stamp_dir / stamps.SWEPT).st_mtime > day_ago
    for root in (copy, third):
        with open_dataset(root) as ds:
            assert ds.index_trusted


def test_without_a_writable_stamp_folder_every_open_checks(
    copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(stamps, "stamp_folder", lambda: blocked / "verified")
    counts = Counts(monkeypatch)
    for _ in range(2):
        with open_dataset(copy) as ds:
            assert not ds.index_trusted and len(ds) == 24
    assert counts.checked == 2


def test_verify_open_neither_trusts_nor_writes_stamps(copy: Path, stamp_dir: Path) -> None:
    with open_dataset(copy) as ds:
        assert not ds.index_trusted
    with PackedDataset(copy, check_sha256=False) as ds:
        assert not ds.index_trusted  # verify checks the index itself, every time
    shutil.rmtree(stamp_dir)
    with PackedDataset(copy, check_sha256=False):
        pass
    assert not stamp_dir.exists()


def test_distinct_shapes_are_the_records_shapes_stamped_or_not(copy: Path) -> None:
    for trusted in (False, True):
        with open_dataset(copy) as ds:
            assert ds.index_trusted is trusted
            want = np.unique(np.asarray(ds.shapes, np.int64), axis=0)
            assert np.array_equal(ds.distinct_shapes, want) and len(want) > 1


def test_a_url_dataset_is_stamped_like_a_local_one(served: Any) -> None:
    url, _, tmp = served
    with open_dataset(url, cache_dir=tmp / "cache") as ds:
        assert not ds.index_trusted
        first = bytes(ds.record(5))
    with open_dataset(url, cache_dir=tmp / "cache") as ds:
        assert ds.index_trusted and bytes(ds.record(5)) == first
    label = ds.root / "index" / "label.npy"  # the cached copy, edited in place
    _flip_in_place(label, keep_mtime=True)
    with pytest.raises(DatasetError, match="sha256"):
        open_dataset(url, cache_dir=tmp / "cache")


@pytest.mark.parametrize(("bad", "first"), [((17,), 17), ((2, 17, 23), 2)])
def test_the_range_check_in_chunks_names_the_first_bad_record_and_counts_all(
    copy: Path, monkeypatch: pytest.MonkeyPatch, bad: tuple[int, ...], first: int
) -> None:
    monkeypatch.setattr(integrity, "CHUNK", 5)  # 24 records: five chunks
    path = copy / "index" / "label.npy"
    array = np.load(path)
    array[list(bad)] = 9
    np.save(path, array)
    raw = json.loads((copy / "manifest.json").read_text())
    raw["fields"]["label"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match=rf"label.*at {len(bad)} records, the first being "
                                           rf"record {first};"):
        open_dataset(copy)


def test_distinct_shapes_in_chunks(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(integrity, "CHUNK", 7)
    with open_dataset(copy) as ds:
        want = np.unique(np.asarray(ds.shapes, np.int64), axis=0)
        assert np.array_equal(ds.distinct_shapes, want)


def _mapped_kib(path: Path) -> int:
    """This process's resident KiB of the mappings of path (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and len(head[0]) > 8 and ":" not in head[0]:
                inside = len(head) == 6 and head[5] == os.path.realpath(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


def test_a_full_check_leaves_no_index_page_mapped(copy: Path) -> None:
    label = copy / "index" / "label.npy"
    with open_dataset(copy) as ds:
        assert not ds.index_trusted
        assert _mapped_kib(label) == 0  # hashed and checked, then forgotten
        assert int(ds.labels[0]) == 0
        assert _mapped_kib(label) > 0  # a read maps its page again


def _vm_flags(path: Path) -> set[str]:
    """The VmFlags of this process's mappings of path (/proc/self/smaps)."""
    flags: set[str] = set()
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and ":" not in head[0]:
                inside = len(head) == 6 and head[5] == os.path.realpath(path)
            elif inside and head[0] == "VmFlags:":
                flags |= set(head[1:])
    return flags


@pytest.mark.parametrize("trusted", [False, True])
def test_index_maps_are_read_at_random_without_read_ahead(copy: Path, trusted: bool) -> None:
    if trusted:
        open_dataset(copy).close()
    with open_dataset(copy) as ds:
        assert ds.index_trusted is trusted
        assert "rr" in _vm_flags(copy / "index" / "offset.npy")  # MADV_RANDOM


def test_a_v2_dataset_stamps_its_columns_too(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import fastloader
    from imagegen import encode, photo_like

    samples = [{"jpg": encode(photo_like(12, 10 + k, k)), "cls": k % 2,
                "emb": np.full(4, k, np.float32)} for k in range(6)]
    dst = tmp_path / "v2.lmdb"
    fastloader.pack(samples, dst, fields={"jpg": "image", "cls": "int",
                                          "emb": ("ndarray", "float32", (4,))}, workers=1)
    counts = Counts(monkeypatch)
    with open_dataset(dst) as ds:
        assert ds.manifest.version == 2 and not ds.index_trusted
        columns = counts.hashed
        assert columns > len(index_mod.CORE_FIELDS)  # the columns' files are hashed too
    counts.reset()
    with open_dataset(dst) as ds:
        assert ds.index_trusted and counts.hashed == 0
        assert ds.sample(3)["emb"].tolist() == [3.0] * 4
        assert np.array_equal(ds.distinct_shapes, [[12, 10 + k] for k in range(6)])
    emb = next((dst / "index").glob("field.emb*.npy"))
    _flip_in_place(emb, keep_mtime=True)
    with pytest.raises(DatasetError, match=rf"{emb.name}.*fails its sha256 check"):
        open_dataset(dst)


def test_a_stamped_v2_open_scans_no_column_row(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns checks only shapes and dtypes when the stamp vouches for its files; a label
    column edited after the stamp is hashed and range-checked again."""
    import fastloader
    from fastloader.format.kinds.scalars import IntKind
    from imagegen import encode, photo_like

    samples = [{"jpg": encode(photo_like(12, 10 + k, k)), "cls": k % 2} for k in range(6)]
    dst = tmp_path / "v2.lmdb"
    fastloader.pack(samples, dst, fields={"jpg": "image", "cls": ("int", ["a", "b"])},
                    workers=1)
    scans = []
    check_column = IntKind.check_column
    monkeypatch.setattr(IntKind, "check_column",
                        lambda self, *args: scans.append(1) or check_column(self, *args))
    with open_dataset(dst) as ds:
        assert not ds.index_trusted and len(scans) == 1
    with open_dataset(dst) as ds:
        assert ds.index_trusted and len(scans) == 1  # no new scan
        assert [int(ds.value("cls", k)) for k in range(6)] == [0, 1] * 3
    path = next((dst / "index").glob("field.cls*.npy"))
    array = np.load(path)
    array[4] = 2  # one past its classes; the manifest re-signed: another version
    np.save(path, array)
    raw = json.loads((dst / "manifest.json").read_text())
    raw["fields"][path.stem]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match=r"a label outside 0\.\.1"):
        open_dataset(dst)
