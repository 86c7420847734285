"""A refused pack keeps its staging (the hidden .DST.partial) for --resume only where a shard
had finished, and says "kept" only then; a refusal before any shard finished leaves nothing
behind and says nothing of resuming (issue 38: "the finished shards are kept" after a
refusal that finished none, and --resume reused 0 of 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastloader import open_dataset, pack
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from imagegen import encode, make_tree, photo_like

BAD = "zz_bad.jpg"  # sorts last: its shard is the last one packed


@pytest.fixture
def bad_tree(tmp_path: Path) -> Path:
    src = make_tree(tmp_path / "src", classes=2, per_class=20, size=(24, 32))
    (src / "class_1" / BAD).write_bytes(b"not a jpeg")
    return src


def staging(dst: Path) -> Path:
    return dst.parent / f".{dst.name}.partial"


def test_a_refusal_before_any_shard_finished_keeps_nothing_and_says_so(
        bad_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dst = tmp_path / "out.h5"  # one shard: it never finishes
    assert main([str(bad_tree), str(dst)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and BAD in err, err
    assert "kept" not in err and "--resume" not in err, err
    assert not dst.exists() and not staging(dst).exists()


def test_pack_refused_before_any_shard_finished_says_nothing_of_resume(
        bad_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out.lmdb"
    with pytest.raises(PackError) as caught:
        pack(bad_tree, dst)
    assert BAD in str(caught.value) and "resume" not in str(caught.value)
    assert not dst.exists() and not staging(dst).exists()


def test_a_refusal_after_shards_finished_keeps_them_and_resume_reuses_them(
        bad_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dst = tmp_path / "out.lmdb"
    args = [str(bad_tree), str(dst), "--shard-size", "4K", "--workers", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and BAD in err, err
    assert err.rstrip().endswith("(the finished shards are kept in the staging folder: rerun "
                                 "with --resume to reuse them)"), err
    assert not dst.exists() and any((staging(dst) / "journal").glob("*.json"))
    (bad_tree / "class_1" / BAD).write_bytes(encode(photo_like(24, 32, 7), quality=90))
    assert main([*args, "--resume"]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    kept, total = (int(n) for n in first.split("reusing ")[1].split(" shards")[0].split(" of "))
    assert 1 <= kept < total, first
    with open_dataset(dst) as ds:
        assert len(ds) == 41
    assert not staging(dst).exists()
