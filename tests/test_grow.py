"""append and merge: every sample exactly once with its label by name, verify clean, readers of
the old version unaffected, bad inputs refused with a clear message."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from fastloader.errors import PackError
from fastloader.format.dataset import PackedDataset
from fastloader.format.manifest import read_manifest
from fastloader.pack.cli.main import main
from fastloader.pack.maintain.grow import append, merge, merged_classes
from fastloader.pack.maintain.verify import verify
from fastloader.pack.pipeline.tree import pack
from helpers import as_format_v1
from treegen import make_flat_tree

SHARD = 2048  # small shards: several per input


def _tree(root: Path, classes: int, drop: tuple[str, ...] = (), size: int = 32) -> Path:
    make_flat_tree(root, classes=classes, per_class=5, size=size)
    for name in drop:
        shutil.rmtree(root / name)
    return root


def _packed(tmp: Path, name: str, tree: Path, suffix: str = ".lmdb") -> Path:
    dst = tmp / f"{name}{suffix}"
    pack(tree, dst, workers=1, quiet=True, shard_size=SHARD)
    return dst


def _samples(path: Path) -> list[tuple[str, str, bytes]]:
    """(source path, class name, record bytes) of every sample, in order."""
    with PackedDataset(path) as ds:
        return [(ds.path(i), ds.classes[int(ds.labels[i])], bytes(ds.record(i, verify=True)))
                for i in range(len(ds))]


def _files(manifest) -> list[tuple[str, str]]:
    return ([(s.file, s.sha256) for s in manifest.shards]
            + [(f.file, f.sha256) for f in manifest.fields.values()])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def two(tmp_path: Path) -> tuple[Path, Path]:
    """Tree A: classes c00 c01; tree B: c01 c02 (other pixels, so other bytes)."""
    a = _tree(tmp_path / "a", 2)
    b = _tree(tmp_path / "b", 3, drop=("c00",), size=40)
    return a, b


def test_merged_classes_keep_first_ids() -> None:
    classes, maps = merged_classes([["cat", "dog"], ["eel", "cat"], ["dog"]])
    assert classes == ["cat", "dog", "eel"]
    assert [m.tolist() for m in maps] == [[0, 1], [2, 0], [1]]


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_merge_keeps_every_sample_once_with_its_class(tmp_path: Path, two, suffix: str) -> None:
    a = _packed(tmp_path, "A", two[0], suffix)
    b = _packed(tmp_path, "B", two[1], suffix)
    out = tmp_path / f"out{suffix}"
    manifest = merge([a, b], out)
    assert manifest.classes == ["c00", "c01", "c02"]
    assert len(manifest.shards) == len(read_manifest(a).shards) + len(read_manifest(b).shards)
    assert _samples(out) == _samples(a) + _samples(b)
    report = verify(out, decode=True)
    assert report.ok, report.problems
    assert read_manifest(out).stats["packed"] == manifest.num_samples == 20


def test_append_tree_in_place_keeps_ids_and_old_readers(tmp_path: Path, two) -> None:
    a = _packed(tmp_path, "A", two[0])
    before = _samples(a)
    old_reader = PackedDataset(a)
    try:
        manifest = append(a, two[1], workers=1)
        assert manifest.classes == ["c00", "c01", "c02"]  # c00, c01 keep ids 0 and 1
        after = _samples(a)
        assert after[: len(before)] == before
        new = sorted((p, c) for p, c, _ in after[len(before):])
        assert new == sorted((f"c{c:02d}/img_{i:04d}.jpg", f"c{c:02d}")
                             for c in (1, 2) for i in range(5))
        assert verify(a, decode=True).ok
        replaced = read_manifest(a)
        append(a, two[1], workers=1)  # a second append: the first reader's index is gone now
        assert len(_samples(a)) == len(after) + 10
        assert verify(a).ok
        # A reader that read the replaced manifest just before the switch still finds every
        # file it names, unchanged.
        for name, sha in _files(replaced):
            assert _sha(a / name) == sha, name
        # The reader opened before both appends still reads its version, all of it.
        assert len(old_reader) == len(before)
        assert [(old_reader.path(i), old_reader.classes[int(old_reader.labels[i])],
                 bytes(old_reader.record(i, verify=True))) for i in range(len(old_reader))
                ] == before
    finally:
        old_reader.close()


def test_a_tree_appended_to_a_v1_dataset_joins_it_as_v1(tmp_path: Path, two) -> None:
    """A dataset packed by an earlier fastloader (format v1) grows in its own format: the
    tree (packed v2 now) joins it without its label column, the samples as a v2 append's."""
    a = as_format_v1(_packed(tmp_path, "A", two[0]))
    v2 = _packed(tmp_path, "A2", two[0])
    before = _samples(a)
    manifest = append(a, two[1], workers=1)
    assert manifest.version == 1 and manifest.sample_fields == []
    assert not any(name.startswith("field.") for name in manifest.fields)
    append(v2, two[1], workers=1)  # the same append to the v2 pack of the same tree
    assert _samples(a) == _samples(v2) and _samples(a)[: len(before)] == before
    assert manifest.classes == ["c00", "c01", "c02"] and verify(a, decode=True).ok


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_append_dataset(tmp_path: Path, two, suffix: str) -> None:
    a = _packed(tmp_path, "A", two[0], suffix)
    b = _packed(tmp_path, "B", two[1], suffix)
    b_samples = _samples(b)
    expected = _samples(a) + b_samples
    append(a, b)
    assert _samples(a) == expected
    assert verify(a).ok
    assert _samples(b) == b_samples and verify(b).ok  # the source is untouched


def test_refusals(tmp_path: Path, two) -> None:
    a = _packed(tmp_path, "A", two[0])
    b = _packed(tmp_path, "B", two[1])
    h = _packed(tmp_path, "H", two[1], ".h5")
    with pytest.raises(PackError, match="backend"):
        merge([a, h], tmp_path / "o.lmdb")
    with pytest.raises(PackError, match="two or more"):
        merge([a], tmp_path / "o.lmdb")
    with pytest.raises(PackError, match="one of the inputs"):
        merge([a, b], a, overwrite=True)
    with pytest.raises(PackError, match="already exists"):
        merge([a, b], h)
    with pytest.raises(PackError, match="not a packed dataset"):
        append(tmp_path / "nothing.lmdb", b)
    from fastloader.pack.api import pack as pack_any

    v2 = tmp_path / "v2.lmdb"
    jpeg = (two[0] / "c00" / "img_0000.jpg").read_bytes()
    pack_any([{"image": jpeg, "x": k} for k in range(4)], v2,
             fields={"image": "image", "x": "int"}, quiet=True, workers=1)
    with pytest.raises(PackError, match="fields"):
        merge([a, v2], tmp_path / "o.lmdb")
    with pytest.raises(PackError, match="fields"):
        append(v2, a)
    assert not (tmp_path / "o.lmdb").exists()
    empty = _tree(tmp_path / "empty", 1)
    for image in (empty / "c00").iterdir():
        image.write_bytes(b"not an image")
    with pytest.raises(PackError, match="could be decoded"):
        append(a, empty, workers=1, skip_bad=True)
    with pytest.raises(PackError, match=r"not an image.*skip_bad=True"):  # the default: stop
        append(a, empty, workers=1)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_damaged_input_is_not_spread_and_dst_stays_whole(tmp_path: Path, two,
                                                         suffix: str) -> None:
    a = _packed(tmp_path, "A", two[0], suffix)
    b = _packed(tmp_path, "B", two[1], suffix)
    before = _samples(a)
    manifest = read_manifest(b)
    with PackedDataset(b) as ds:  # flip a byte inside the last record's bytes
        last = len(ds) - 1
        target = ds.record(last).tobytes()
    shard = b / manifest.shards[-1].file
    data = bytearray(shard.read_bytes())
    where = bytes(data).index(target) + len(target) // 2
    data[where] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(PackError, match=r"sha256|crc32"):
        append(a, b)
    assert _samples(a) == before and verify(a).ok  # DST unchanged, still whole
    with pytest.raises(PackError, match=r"sha256|crc32"):
        merge([a, b], tmp_path / f"o{suffix}")
    assert not (tmp_path / f"o{suffix}").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_cli_append_and_merge(tmp_path: Path, two, capsys) -> None:
    a = _packed(tmp_path, "A", two[0])
    b = _packed(tmp_path, "B", two[1])
    expected = _samples(a) + _samples(b)
    out = tmp_path / "out.lmdb"
    assert main(["merge", str(a), str(b), str(out)]) == 0
    assert _samples(out) == expected
    assert main(["merge", str(a), str(b), str(out)]) == 2  # exists
    assert "already exists" in capsys.readouterr().err
    assert main(["merge", str(a), str(b), str(out), "--overwrite", "--quiet"]) == 0
    assert main(["append", str(a), str(two[1]), "--workers", "1"]) == 0
    assert [(p, c) for p, c, _ in _samples(a)] == [(p, c) for p, c, _ in expected]
    assert main(["verify", str(a), "--quiet"]) == 0
    assert main(["merge", str(a), str(out)]) == 2  # one input only
    skipped = json.loads((a / "skipped.json").read_text())
    assert skipped == []
