"""A source folder given where a packed dataset goes (FastLoader("photos/"), `packdata info
photos/`, `packdata verify photos/`) is named for what it is (an image tree, audio clips, a
table) with the command that packs it elsewhere, in the words of the interface used; never
"pack it again" into the source itself (issue 38)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from audiogen import clip
from fastloader import FastLoader, open_dataset
from fastloader.errors import DatasetNotFoundError
from fastloader.pack.cli.main import main
from imagegen import make_tree


def image_tree(root: Path) -> tuple[Path, str]:
    tree = make_tree(root, classes=2, per_class=3, size=(24, 32))
    return tree, "an image tree (folders of image files)"


def clips(root: Path) -> tuple[Path, str]:
    for k in range(3):
        (root / "speaker_a").mkdir(parents=True, exist_ok=True)
        (root / "speaker_a" / f"utt_{k}.flac").write_bytes(clip(16000, 0.2, seed=k))
    return root, "a folder of audio clips"


def table(root: Path) -> tuple[Path, str]:
    make_tree(root / "images", classes=1, per_class=3, size=(24, 32))
    rows = [f"images/class_0/img_{i:03d}.jpg,{i}" for i in range(3)]
    (root / "train.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    return root, "a folder holding a table"


SOURCES = {"images": image_tree, "clips": clips, "table": table}


@pytest.fixture(params=sorted(SOURCES))
def source(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str, Path]:
    """A source folder, what the advice calls it, and the SRC its pack command names."""
    root, what = SOURCES[request.param](tmp_path / "photos")
    return root, what, root / "train.csv" if request.param == "table" else root


def test_fastloader_on_a_source_folder_says_what_it_is_in_python_words(
        source: tuple[Path, str, Path]) -> None:
    root, what, src = source
    with pytest.raises(DatasetNotFoundError) as caught:
        FastLoader(str(root), batch_size=2)
    said = str(caught.value)
    assert said.startswith(f"{root} is {what}"), said
    assert f'`fastloader.pack("{src}", "{root.with_name("photos.lmdb")}")`' in said, said
    assert "packdata" not in said and "--overwrite" not in said and "again" not in said


@pytest.mark.parametrize("command", ["info", "verify"])
def test_packdata_on_a_source_folder_says_what_it_is_in_cli_words(
        source: tuple[Path, str, Path], command: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    root, what, src = source
    assert main([command, str(root)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"packdata: error: {root} is {what}, not a packed dataset: pack it into one first, "
        f"e.g. `packdata {src} {root.with_name('photos.lmdb')}`, and use that."], err


def test_the_advised_command_packs_the_tree(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = image_tree(tmp_path / "photos")
    assert main(["info", str(root)]) == 2
    advised = capsys.readouterr().err.split("`")[1]
    assert main([*shlex.split(advised)[1:], "--quiet"]) == 0
    with open_dataset(tmp_path / "photos.lmdb") as ds:
        assert len(ds) == 6


def test_a_folder_of_nothing_pack_reads_keeps_the_dataset_advice(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello")
    with pytest.raises(DatasetNotFoundError, match="not a complete packed dataset"):
        open_dataset(tmp_path / "notes")
