"""One rule for bad items, whatever the source: a pack stops at the first one (naming it and
--skip-bad) and makes no dataset, strict=True says the same explicitly, skip_bad=True packs the
rest and lists the bad ones in skipped.json, and the two together are refused."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

import fastloader
from fastloader import open_dataset
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from helpers import coco_file, sample_table
from imagegen import encode, make_tree, photo_like

GARBAGE = b"this is not an image" * 4


def _imagefolder(root: Path) -> tuple[Any, dict[str, Any], str]:
    tree = make_tree(root / "tree", 2, 3)
    (tree / "class_1" / "img_001.jpg").write_bytes(GARBAGE)
    return tree, {}, "img_001.jpg"


def _table(root: Path) -> tuple[Any, dict[str, Any], str]:
    return sample_table(root / "t", 8, bad=(3,)), {"label": "species"}, "line 5"


def _members(bad: int) -> list[tuple[str, bytes]]:
    return [member for k in range(6) for member in (
        (f"s{k}.jpg", GARBAGE if k == bad else encode(photo_like(16, 20, k))),
        (f"s{k}.cls", str(k % 2).encode()))]


def _files(root: Path) -> tuple[Any, dict[str, Any], str]:
    (root / "g").mkdir(parents=True)
    for name, data in _members(4):
        (root / "g" / name).write_bytes(data)
    return root / "g", {}, "s4"


def _tar(root: Path) -> tuple[Any, dict[str, Any], str]:
    root.mkdir(parents=True)
    with tarfile.open(root / "w.tar", "w") as tar:
        for name, data in _members(2):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return root / "w.tar", {}, "s2"


def _coco(root: Path) -> tuple[Any, dict[str, Any], str]:
    path = coco_file(root / "c", 6)
    (root / "c" / "images" / "004.png").write_bytes(GARBAGE)
    return path, {}, "004.png"


def _python(root: Path) -> tuple[Any, dict[str, Any], str]:
    samples = [{"image": GARBAGE if k == 5 else encode(photo_like(16, 20, k)), "y": k}
               for k in range(7)]
    return samples, {"fields": {"image": "image", "y": "int"}}, "sample 5"


SOURCES = {"imagefolder": _imagefolder, "table": _table, "files": _files, "tar": _tar,
           "coco": _coco, "python": _python}


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize("strict", [False, True])
def test_a_bad_item_stops_every_source_by_default(tmp_path: Path, kind: str,
                                                  strict: bool) -> None:
    src, options, bad = SOURCES[kind](tmp_path / "in")
    dst = tmp_path / "out.lmdb"
    with pytest.raises(PackError, match=rf"{bad}.*pass skip_bad=True"):
        fastloader.pack(src, dst, workers=1, strict=strict, **options)
    assert not dst.exists()


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize("finished", [True, False], ids=["shards-finished", "none-finished"])
def test_a_failed_pack_keeps_its_staging_for_resume_and_says_so(tmp_path: Path, kind: str,
                                                                finished: bool) -> None:
    # one rule for every source that can be recognised again (Python samples read by index
    # included), once a shard finished before the bad item (tiny shards: one an item); a
    # plain iterable, read once, cannot be, and a pack that finished no shard (one shard)
    # has nothing to reuse, so their staging is removed (and --resume is not offered)
    src, options, bad = SOURCES[kind](tmp_path / "in")
    shards = {"shard_size": 1} if finished else {}
    for resumable in (True, False) if kind == "python" else (True,):
        dst = tmp_path / f"out-{resumable}.lmdb"
        with pytest.raises(PackError, match=bad) as caught:
            fastloader.pack(src if resumable else iter(src), dst, workers=1, **options,
                            **shards)
        kept = resumable and finished
        staging = tmp_path / f".{dst.name}.partial"
        assert staging.is_dir() == kept and ("resume=True" in str(caught.value)) == kept
        if kept:
            assert (staging / "plan.json").is_file()


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_skip_bad_packs_the_rest_of_every_source_and_lists_the_bad_item(tmp_path: Path,
                                                                        kind: str) -> None:
    src, options, bad = SOURCES[kind](tmp_path / "in")
    dst = tmp_path / "out.lmdb"
    manifest = fastloader.pack(src, dst, workers=2, skip_bad=True, **options)
    skipped = json.loads((dst / "skipped.json").read_text())
    assert len(skipped) == 1 and bad in json.dumps(skipped), skipped
    assert manifest.stats["skipped"] == 1
    with open_dataset(dst) as ds:
        assert len(ds) == manifest.num_samples > 0


@pytest.mark.parametrize("kind", ["imagefolder", "table"])
def test_strict_and_skip_bad_together_are_refused_naming_both(tmp_path: Path,
                                                             kind: str, capsys) -> None:
    src, options, _ = SOURCES[kind](tmp_path / "in")
    with pytest.raises(PackError, match=r"strict=True and skip_bad=True contradict"):
        fastloader.pack(src, tmp_path / "o.lmdb", strict=True, skip_bad=True, **options)
    argv = [str(src), str(tmp_path / "o.lmdb"), "--strict", "--skip-bad", "--quiet"]
    assert main(argv + (["--label", "species"] if kind == "table" else [])) == 2
    assert "--strict" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # refused before any work
