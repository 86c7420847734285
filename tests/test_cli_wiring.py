"""packdata's options reach pack(), its exit codes for I/O failures and interrupts, ./info."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fastloader.format.manifest import read_manifest
from fastloader.format.open import open_dataset
from fastloader.pack.cli.main import main, parse_size
from faults import packdata_command
from imagegen import make_tree

QUIET = ["--workers", "1", "--quiet"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tree(tmp_path_factory.mktemp("wiring") / "tree", classes=2, per_class=3)


def test_max_side_and_quality_reach_pack(tree: Path, tmp_path: Path) -> None:
    sizes = {}
    for quality in (20, 95):
        dst = tmp_path / f"q{quality}.lmdb"
        options = ["--max-side", "32", "--quality", str(quality), *QUIET]
        assert main([str(tree), str(dst), *options]) == 0
        manifest = read_manifest(dst)
        assert manifest.options["max_side"] == 32 and manifest.options["quality"] == quality
        with open_dataset(dst) as ds:
            assert int(ds.shapes.max()) <= 32  # every 48x64+ image was re-encoded smaller
            sizes[quality] = sum(len(bytes(ds.record(i))) for i in range(len(ds)))
    assert sizes[20] < sizes[95]


def test_format_picks_the_backend(tree: Path, tmp_path: Path, capsys) -> None:
    assert main([str(tree), str(tmp_path / "plain"), "--format", "hdf5", *QUIET]) == 0
    with open_dataset(tmp_path / "plain") as ds:
        assert ds.backend == "hdf5"
    assert main([str(tree), str(tmp_path / "x.h5"), "--format", "lmdb", *QUIET]) == 2
    assert "--format" in capsys.readouterr().err


@pytest.mark.native
def test_restart_mcus_reaches_the_tile_option(tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "t.lmdb"
    assert main([str(tree), str(dst), "--tiles", "--restart-mcus", "4", *QUIET]) == 0
    assert read_manifest(dst).options["tiles"] == {"version": 1, "restart_mcus": 4}


def test_workers_reaches_pack(tree: Path, tmp_path: Path, capsys) -> None:
    assert main([str(tree), str(tmp_path / "w.lmdb"), "--workers", "0", "--quiet"]) == 2
    assert "workers" in capsys.readouterr().err
    assert main([str(tree), str(tmp_path / "w.lmdb"), "--workers", "2", "--quiet"]) == 0
    with open_dataset(tmp_path / "w.lmdb") as ds:
        assert len(ds) == 6


@pytest.mark.parametrize("text", ["", "M", "abc", "12Q", "0", "-5K", "0.0001K"])
def test_parse_size_refuses_what_is_not_a_size(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=repr(text).replace("\\", "\\\\")):
        parse_size(text)


def test_a_bad_shard_size_is_a_usage_error(tree: Path, tmp_path: Path, capsys) -> None:
    assert main([str(tree), str(tmp_path / "s.lmdb"), "--shard-size", "lots", *QUIET]) == 2
    assert "lots" in capsys.readouterr().err


def test_a_source_folder_named_info_needs_dot_slash(tree: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys) -> None:
    monkeypatch.chdir(tmp_path)
    make_tree(tmp_path / "info", classes=1, per_class=2)
    # Bare "info" is the subcommand: "out.lmdb" is read as the dataset to describe.
    assert main(["info", "out.lmdb"]) == 2
    assert not (tmp_path / "out.lmdb").exists()
    capsys.readouterr()
    assert main(["./info", "out.lmdb", *QUIET]) == 0  # ./info is the folder
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert len(ds) == 2


def test_an_os_error_exits_1_with_the_resume_hint(tree: Path, tmp_path: Path, capsys) -> None:
    # A name longer than any file system allows: mkdir of the staging folder fails with OSError;
    # nothing was staged, so the hint is to rerun, without --resume
    dst = tmp_path / ("d" * 300 + ".lmdb")
    assert main([str(tree), str(dst), *QUIET]) == 1
    err = capsys.readouterr().err
    assert err.startswith("packdata: error: ") and "Traceback" not in err
    assert err.rstrip().endswith("; fix it and rerun") and "--resume" not in err


def test_an_interrupt_exits_130_with_the_resume_hint(tmp_path: Path) -> None:
    # The pack holds (faults.py's hold) once every shard is written, just before its final rename:
    # the interrupt lands there on any machine, however fast or loaded.
    make_tree(tmp_path / "src", classes=2, per_class=4, size=(40, 48))
    hold = tmp_path / "hold"
    hold.mkdir()
    dst = tmp_path / "out.lmdb"
    command = packdata_command([str(tmp_path / "src"), str(dst), "--max-side", "64",
                                "--workers", "1", "--quiet"], hold=hold)
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    staging = tmp_path / ".out.lmdb.partial"
    deadline = time.monotonic() + 120  # a hang guard, not a speed assertion
    while not (hold / "waiting").exists() and proc.poll() is None and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the pack ended before it could be interrupted"
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "--resume" in err and "Traceback" not in err
    assert not dst.exists()  # interrupted before the rename: only the staging folder is there
    assert read_manifest(staging).options["max_side"] == 64


@pytest.mark.native
def test_info_and_verify_without_decode_on_a_tiled_dataset(tree: Path, tmp_path: Path,
                                                           capsys) -> None:
    dst = tmp_path / "tiled.lmdb"
    assert main([str(tree), str(dst), "--tiles", *QUIET]) == 0
    capsys.readouterr()
    assert main(["info", str(dst), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == 6 and info["options"]["tiles"]["restart_mcus"] == 2
    assert main(["info", str(dst)]) == 0
    assert "tiles" in capsys.readouterr().out
    assert main(["verify", str(dst)]) == 0
    out = capsys.readouterr().out
    assert "OK:" in out and "6 records checked" in out and "decoded" not in out
