"""--resume for tables, file groups, tars, COCO and Python samples: a killed pack leaves no
dataset, and resuming reuses its finished parts (shard, index arrays and columns) to the same
dataset a fresh pack makes; a changed item rebuilds only its own shard."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fastloader
from fastloader import open_dataset
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from fastloader.pack.staging.journal import staging_path
from faults import packdata_command
from helpers import dataset_bytes
from imagegen import encode, photo_like


def make_table(folder: Path, n: int = 30) -> Path:
    (folder / "img").mkdir(parents=True)
    lines = ["path,species,size,note"]
    for k in range(n):
        (folder / "img" / f"{k}.jpg").write_bytes(encode(photo_like(20, 20 + k % 5, k)))
        lines.append(f"img/{k}.jpg,{['cat', 'dog'][k % 2]},{k * 0.5},note {k}")
    (folder / "t.csv").write_text("\n".join(lines) + "\n")
    return folder / "t.csv"


def same_samples(a: Path, b: Path) -> None:
    with open_dataset(a) as x, open_dataset(b) as y:
        assert len(x) == len(y) and x.classes == y.classes
        for i in range(len(x)):
            for name, value in x.sample(i).items():
                other = y.sample(i)[name]
                assert np.array_equal(value, other) if isinstance(value, np.ndarray) else \
                    value == other, (i, name)


def test_a_killed_table_pack_resumes_to_the_same_dataset(tmp_path: Path) -> None:
    table = make_table(tmp_path / "src")
    dst = tmp_path / "out.lmdb"
    argv = [str(table), str(dst), "--label", "species", "--shard-size", "4K", "--workers",
            "2", "--quiet"]
    killed = subprocess.run(packdata_command(argv, kill_after_parts=3), timeout=120,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert killed.returncode == -9 and not dst.exists()
    staging = staging_path(dst)
    assert len(list((staging / "journal").glob("*.part.npz"))) == 3
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in staging.glob("shard-*")}
    assert main([*argv, "--resume"]) == 0
    assert all(((dst / name).stat().st_ino, (dst / name).stat().st_mtime_ns) == stamp
               for name, stamp in sorted(kept.items())[:3])  # reused, not rewritten
    fastloader.pack(table, tmp_path / "fresh.lmdb", label="species", shard_size=4 << 10,
                    workers=1)
    same_samples(dst, tmp_path / "fresh.lmdb")


def test_a_changed_row_is_packed_anew_on_resume(tmp_path: Path) -> None:
    table = make_table(tmp_path / "src", 12)
    dst = tmp_path / "out.lmdb"

    def stop(done: int, total: int, nbytes: int) -> None:
        if done >= 8:
            raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="simulated"):
        fastloader.pack(table, dst, shard_size=2 << 10, workers=1, progress=stop)
    assert list((staging_path(dst) / "journal").glob("*.json"))  # kept for resume
    table.write_text(table.read_text().replace("note 3", "note three"))
    fastloader.pack(table, dst, shard_size=2 << 10, workers=1, resume=True)
    with open_dataset(dst) as ds:
        assert ds.sample(3)["note"] == "note three" and len(ds) == 12


class Samples:
    """A map-style dataset of n Python samples (image bytes or a file's path, a label and an
    array) that counts the samples it is asked for; each value can be changed."""

    def __init__(self, root: Path, n: int, paths: bool = False) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.images = [encode(photo_like(16, 20 + k % 3, k)) for k in range(n)]
        self.files = []
        for k, data in enumerate(self.images):
            (root / f"{k}.jpg").write_bytes(data)
            self.files.append(str(root / f"{k}.jpg"))
        self.paths, self.labels, self.read = paths, [k % 3 for k in range(n)], 0
        self.arrays = [np.full(3, k, np.float32) for k in range(n)]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        self.read += 1
        image = self.files[i] if self.paths else self.images[i]
        return {"image": image, "y": self.labels[i], "v": self.arrays[i]}


PYTHON_FIELDS = {"image": "image", "y": "int", "v": ("ndarray", "float32", (3,))}


def _stopped(samples: Any, dst: Path, **options: Any) -> dict[str, tuple[int, int]]:
    """Pack samples one a shard and stop before the last part; the finished shard files'
    (inode, mtime) by name."""
    def stop(done: int, total: int, nbytes: int) -> None:
        if done >= total:  # every shard's part written but the last
            raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="simulated"):
        fastloader.pack(samples, dst, fields=PYTHON_FIELDS, shard_samples=1, progress=stop,
                        **options)
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(staging_path(dst).glob("shard-*"))}


def _stamps(dst: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in dst.glob("shard-*")}


@pytest.mark.parametrize("workers", [1, 2])
def test_python_samples_resume_reusing_their_finished_parts(tmp_path: Path,
                                                            workers: int) -> None:
    samples = Samples(tmp_path / "img", 10)  # 10 items: two workers prepare them on a pool
    dst = tmp_path / "out.lmdb"
    kept = _stopped(samples, dst, workers=workers)
    assert len(kept) == 9
    samples.read = 0
    fastloader.pack(samples, dst, fields=PYTHON_FIELDS, shard_samples=1, workers=workers,
                    resume=True)
    assert _stamps(dst) | kept == _stamps(dst)  # every finished shard reused, not rewritten
    # the check read each finished shard's sample once (one worker: here; two: on the pool,
    # in forked children that count their own), and the last one was packed here
    assert samples.read == (10 if workers == 1 else 1)
    fastloader.pack(samples, tmp_path / "fresh.lmdb", fields=PYTHON_FIELDS, shard_samples=1,
                    workers=1)
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "fresh.lmdb")


@pytest.mark.parametrize("change", ["label", "image bytes", "image file", "array"])
@pytest.mark.parametrize("workers", [1, 2])  # two: the check reads ahead on the pool
def test_a_changed_python_sample_rebuilds_only_its_shard(tmp_path: Path, change: str,
                                                         workers: int) -> None:
    samples = Samples(tmp_path / "img", 10, paths=change == "image file")
    dst = tmp_path / "out.lmdb"
    kept = _stopped(samples, dst, workers=workers)
    if change == "label":
        samples.labels[2] = 1
    elif change == "image bytes":
        samples.images[2] = encode(photo_like(16, 21, 99))
    elif change == "image file":  # the same path, rewritten: its size and mtime tell
        Path(samples.files[2]).write_bytes(encode(photo_like(17, 21, 99)))
    else:
        samples.arrays[2] = np.asarray([2, 2, 2.5], np.float32)
    fastloader.pack(samples, dst, fields=PYTHON_FIELDS, shard_samples=1, workers=workers,
                    resume=True)
    stamps = _stamps(dst)
    rebuilt = {k for k, name in enumerate(sorted(kept)) if stamps[name] != kept[name]}
    assert rebuilt == {2}
    fastloader.pack(samples, tmp_path / "fresh.lmdb", fields=PYTHON_FIELDS, shard_samples=1,
                    workers=1)
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "fresh.lmdb")


def test_only_the_pack_that_planned_python_samples_commits_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dst = tmp_path / "out.lmdb"
    _stopped(Samples(tmp_path / "img", 3), dst, workers=1)
    for step in (["shard", str(dst), "--range", "2:3"], ["commit", str(dst)]):
        assert main([*step, "--quiet"]) != 0
        assert "Python samples" in capsys.readouterr().err
    assert not dst.exists() and staging_path(dst).is_dir()


def test_a_plain_iterable_of_python_samples_cannot_resume(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="resume=True needs samples it can read again by index"):
        fastloader.pack(iter([{}]), tmp_path / "o.lmdb", fields={"image": "image"},
                        resume=True)
    assert not staging_path(tmp_path / "o.lmdb").exists()


def _groups(folder: Path, n: int = 12) -> list[tuple[str, bytes]]:
    return [member for k in range(n) for member in (
        (f"s{k:02d}.jpg", encode(photo_like(20, 24 + k % 4, k))), (f"s{k:02d}.cls", b"1"))]


def _resumable(kind: str, root: Path) -> Any:
    """A source of 12 items of each resumable kind: the table, file groups, a tar, COCO."""
    if kind == "table":
        return make_table(root, 12)
    if kind == "coco":
        from helpers import coco_file

        return coco_file(root, 12)
    root.mkdir(parents=True)
    if kind == "files":
        for name, data in _groups(root):
            (root / name).write_bytes(data)
        return root
    import io
    import tarfile

    with tarfile.open(root / "w.tar", "w") as tar:
        for name, data in _groups(root):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return root / "w.tar"


@pytest.mark.parametrize("kind", ["table", "files", "tar", "coco"])
def test_every_importer_resumes_reusing_its_finished_parts(tmp_path: Path, kind: str) -> None:
    src = _resumable(kind, tmp_path / "src")
    options: dict[str, Any] = {"label": "species"} if kind == "table" else {}
    dst = tmp_path / "out.lmdb"

    def stop(done: int, total: int, nbytes: int) -> None:
        if done >= 8:
            raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="simulated"):
        fastloader.pack(src, dst, shard_size=1500, workers=1, progress=stop, **options)
    parts = {p.name: p.stat().st_mtime_ns for p in (staging_path(dst) / "journal").glob("*.json")}
    assert len(parts) >= 2
    calls: list[tuple[int, int, int]] = []
    fastloader.pack(src, dst, shard_size=1500, workers=1, resume=True,
                    progress=lambda *args: calls.append(args), **options)
    assert calls and calls[0][0] > 1  # the finished parts' samples were not redone
    fastloader.pack(src, tmp_path / "fresh.lmdb", shard_size=1500, workers=1, **options)
    same_samples(dst, tmp_path / "fresh.lmdb")


def _tar_of(path: Path, members: list[tuple[str, bytes]]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _group(k: int, label: int) -> list[tuple[str, bytes]]:
    return [(f"s{k}.jpg", encode(photo_like(16, 20, k))), (f"s{k}.cls", str(label).encode())]


def _item_source(kind: str, root: Path) -> tuple[Any, dict[str, Any], Any, set[int]]:
    """(src, options, change one item, the shards that change reads into) of 6 items."""
    from helpers import coco_file

    root.mkdir(parents=True)
    if kind == "table":
        table = make_table(root, 6)
        return table, {"label": "species"}, lambda: table.write_text(
            table.read_text().replace("note 2", "note Z")), {2}
    if kind == "files":
        for k in range(6):
            for name, data in _group(k, k % 2):
                (root / name).write_bytes(data)
        return root, {}, lambda: (root / "s2.cls").write_bytes(b"1"), {2}
    if kind == "tar":
        for name, ks in (("a.tar", range(3)), ("b.tar", range(3, 6))):
            _tar_of(root / name, [m for k in ks for m in _group(k, k % 2)])
        # b.tar rewritten with one label changed: its own groups change, a.tar's do not
        return str(root / "{a,b}.tar"), {}, lambda: _tar_of(root / "b.tar", [
            m for k in range(3, 6) for m in _group(k, 1 if k == 4 else k % 2)]), {3, 4, 5}
    path = coco_file(root, 6)

    def move_box() -> None:
        import json

        data = json.loads(path.read_text())
        next(a for a in data["annotations"] if a["image_id"] == 12)["bbox"][2] = 9
        path.write_text(json.dumps(data))

    return path, {"masks": kind == "coco-masks"}, move_box, {2}


@pytest.mark.parametrize("kind", ["table", "files", "tar", "coco", "coco-masks"])
def test_resume_rebuilds_only_the_shards_of_changed_items(tmp_path: Path, kind: str) -> None:
    src, options, change, changed = _item_source(kind, tmp_path / "src")
    dst = tmp_path / "out.lmdb"
    pack = {"shard_size": 1, "workers": 1, **options}  # one item a shard

    def stop(done: int, total: int, nbytes: int) -> None:
        if done >= total:  # every shard's part written but the last
            raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="simulated"):
        fastloader.pack(src, dst, progress=stop, **pack)
    staging = staging_path(dst)
    shards = sorted(staging.glob("shard-*"))
    assert len(shards) == 5
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in shards}
    change()
    fastloader.pack(src, dst, resume=True, **pack)
    stamps = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in dst.glob("shard-*")}
    rebuilt = {k for k, name in enumerate(sorted(kept)) if stamps[name] != kept[name]}
    assert rebuilt == changed - {5}  # shard 5 was never built before
    fastloader.pack(src, tmp_path / "fresh.lmdb", **pack)
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "fresh.lmdb")
