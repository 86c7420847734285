"""The packdata CLI: bad input gives exit 2 and one line, info output, verify catches damage."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastloader.format.open import open_dataset
from fastloader.pack.cli.main import main, parse_size
from treegen import CLASSES, add_broken_files, make_flat_tree


@pytest.fixture(scope="module")
def src(mixed_tree: tuple[Path, dict[str, bytes]]) -> Path:
    return mixed_tree[0]


@pytest.fixture(scope="module", params=[".lmdb", ".h5"])
def dataset(request: pytest.FixtureRequest, src: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("cli") / f"out{request.param}"
    assert main([str(src), str(dst), "--shard-size", "6K", "--workers", "1", "--quiet"]) == 0
    return dst


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("packdata: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_bad_input_exits_2_with_one_line_naming_the_path(
    tmp_path: Path, src: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    (empty / "a_class").mkdir(parents=True)
    (tmp_path / "file.jpg").write_bytes(b"x")
    (tmp_path / "taken.lmdb").mkdir()
    (tmp_path / "taken.lmdb" / "manifest.json").write_text("{}")
    cases = [
        ([str(tmp_path / "missing"), str(tmp_path / "a.lmdb")], ["missing", "does not exist"]),
        ([str(empty), str(tmp_path / "b.lmdb")], ["empty", "no image files"]),
        ([str(tmp_path / "file.jpg"), str(tmp_path / "c.lmdb")], ["file.jpg", "is a file"]),
        ([str(src), str(tmp_path / "taken.lmdb")], ["taken.lmdb", "--overwrite"]),
        ([str(src), str(tmp_path / "d.zip")], ["d.zip", "--format"]),
        ([str(src), str(tmp_path / "no" / "e.lmdb")], [str(tmp_path / "no"), "does not exist"]),
        ([str(src), "/proc/fastloader-test.lmdb"], ["/proc", "writable"]),  # root can't either
        ([str(src), str(tmp_path / "file.jpg" / "f.h5")], ["file.jpg", "does not exist"]),
    ]
    for argv, needles in cases:
        assert main([*argv, "--workers", "1"]) == 2, argv
        _one_line_error(capsys, *needles)
    assert not list(tmp_path.glob("*.lmdb.partial")) and not (tmp_path / "a.lmdb").exists()


def test_module_entry_point_reports_bad_input_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "taken.h5").mkdir()
    for argv in (["missing_src", "x.lmdb"], [str(tmp_path), str(tmp_path / "taken.h5")]):
        run = subprocess.run(
            [sys.executable, "-m", "fastloader.pack.cli.main", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert run.returncode == 2
        assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
        assert run.stderr.startswith("packdata: error: ")


def test_help_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "packdata info DST" in out and "packdata verify DST" in out and "--resume" in out
    assert main([]) == 2
    assert main(["verify"]) == 2
    assert main(["info", "--help"]) == 0
    assert parse_size("256M") == 256 << 20 and parse_size("1GiB") == 1 << 30
    assert parse_size("1000") == 1000 and parse_size("1.5K") == 1536


def test_pack_summary_lists_skipped_files(tmp_path: Path, capsys) -> None:
    make_flat_tree(tmp_path / "src", classes=3, per_class=2)
    broken = add_broken_files(tmp_path / "src")
    dst = tmp_path / "out.h5"
    assert main([str(tmp_path / "src"), str(dst), "--workers", "1", "--skip-bad"]) == 0
    err = capsys.readouterr().err
    assert f"packed 6 images into {dst}" in err and "files/s" in err and "MB/s" in err
    assert f"skipped {len(broken)} unreadable files" in err
    assert all(path in err for path in broken)
    for flags in ([], ["--strict"]):  # the default stops at the first bad file, as --strict
        assert main([str(tmp_path / "src"), str(tmp_path / "strict.h5"), *flags]) == 2
        _one_line_error(capsys, "--skip-bad")
    assert main([str(tmp_path / "src"), str(tmp_path / "both.h5"), "--strict",
                 "--skip-bad"]) == 2
    _one_line_error(capsys, "--strict and --skip-bad contradict each other")


def test_info_shows_counts_classes_shards_sizes_and_options(dataset: Path, capsys) -> None:
    assert main(["info", str(dataset)]) == 0
    out = capsys.readouterr().out
    with open_dataset(dataset) as ds:
        shards, count = len(ds.manifest.shards), len(ds)
        counts = np.bincount(ds.labels).tolist()
    assert f"records   {count} in {shards} shards" in out
    assert "height    1 min" in out and "150 max" in out and "width     1 min" in out
    assert "JPEG 8" in out and "PNG 2" in out and "quality=90" in out
    for name, n in zip(CLASSES, counts, strict=True):
        assert any(line.split() == [name, str(n)] for line in out.splitlines()), (name, out)
    assert main(["info", str(dataset), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == count and info["class_counts"] == dict(
        zip(CLASSES, counts, strict=True)
    )
    assert info["backend"] == ("lmdb" if dataset.suffix == ".lmdb" else "hdf5")


def test_info_on_a_missing_dataset_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["info", str(tmp_path / "none.lmdb")]) == 2
    _one_line_error(capsys, "none.lmdb", "packdata")


def test_verify_passes_an_intact_dataset_with_and_without_decode(dataset: Path, capsys) -> None:
    assert main(["verify", str(dataset)]) == 0
    assert main(["verify", str(dataset), "--decode"]) == 0
    out = capsys.readouterr().out
    assert "all intact" in out and "checked and decoded" in out


def _flip_a_record_byte(copy: Path, index: int) -> None:
    with open_dataset(copy) as ds:
        record = bytes(ds.record(index))
        shard = copy / ds.shard_file(index)
    data = bytearray(shard.read_bytes())
    where = data.find(record[len(record) // 2 : len(record) // 2 + 64])
    assert where > 0 and data.find(record[len(record) // 2 :], where + 1) == -1
    data[where + 10] ^= 0x01
    shard.write_bytes(bytes(data))


def test_verify_names_the_record_with_a_flipped_byte(dataset: Path, tmp_path: Path, capsys) -> None:
    copy = tmp_path / dataset.name
    shutil.copytree(dataset, copy)
    with open_dataset(copy) as ds:
        index = int(np.argmax(ds.lengths))  # the big JPEG: its bytes are unique in the shard
        source, shard = ds.paths[index], ds.shard_file(index)
    _flip_a_record_byte(copy, index)
    assert main(["verify", str(copy)]) == 1
    captured = capsys.readouterr()
    assert f"record {index} (shard {shard!r}, source {source!r}): crc32 mismatch" in captured.out
    assert f"shard {shard!r}" in captured.out and "sha256" in captured.out
    assert "DAMAGED" in captured.err and "1 bad records" in captured.err


def test_verify_catches_missing_shards_and_edited_index(dataset: Path, tmp_path: Path, capsys):
    copy = tmp_path / dataset.name
    shutil.copytree(dataset, copy)
    shapes = np.load(copy / "index" / "shape.npy", allow_pickle=False).copy()
    shapes[0] = (999, 999)
    np.save(copy / "index" / "shape.npy", shapes, allow_pickle=False)
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "index field 'shape'" in out and "decodes to" not in out
    assert main(["verify", str(copy), "--decode"]) == 1
    assert "the index says 999x999" in capsys.readouterr().out
    last = sorted(copy.glob("shard-*"))[-1]
    last.unlink()
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"{last.name!r}): file is missing" in out and "cannot be read" in out
