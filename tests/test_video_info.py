"""A packed video dataset's account and checks: `packdata info` (hours, frames, fps and size
histograms, codecs from a bounded sample), `verify --decode`, the unpacked folder's advice
and `packdata --help`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastloader.decode.video import VIDEO_EXTENSIONS
from fastloader.errors import DatasetNotFoundError
from fastloader.format.kinds import VIDEO
from fastloader.format.open import open_dataset
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package
from fastloader.pack.cli.main import main
from fastloader.pack.maintain.info import dataset_info, format_info
from videotree import make_clips, packdata, write_tree

av = pytest.importorskip("av", reason="PyAV (the video extra) is a test dependency")


pytestmark = pytest.mark.native_neutral


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    return make_clips()


@pytest.fixture()
def packed(tmp_path: Path, clips: dict[str, bytes]) -> Path:
    write_tree(tmp_path / "t", clips)
    pack(tmp_path / "t", tmp_path / "v.lmdb")
    return tmp_path / "v.lmdb"


def test_info_gives_hours_rates_sizes_and_codecs(packed: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    info = dataset_info(packed)
    assert "height" not in info and "width" not in info and "audio" not in info
    clips = info["video"]
    # h264, h264_odd, vp9_odd, h264_vfr: frames / rate, the VFR one to its last frame's end
    seconds = [24 / 8, 10 / 10, 16 / 8, (90 + 10) / 80]
    assert clips["clips"] == 4 and clips["frames"] == 24 + 10 + 16 + 6
    assert clips["hours"] == round(sum(seconds) / 3600, 4) == 0.002
    assert clips["seconds"] == {"min": 1.0, "median": 1.625, "mean": 1.812, "max": 3.0}
    assert list(clips["fps"].items()) == [("8.0", 2), ("4.8", 1), ("10.0", 1)]
    assert list(clips["resolutions"].items()) == [("64x48", 2), ("47x33", 1), ("63x45", 1)]
    assert info["codecs"] == {"vp9": 1, "h264": 3} and "codecs_sampled" not in info
    assert main(["info", str(packed)]) == 0
    text = capsys.readouterr().out
    assert "video     4 clips, 0.00 hours, 56 frames" in text
    assert "seconds   1 min, 1.625 median, 3 max" in text
    assert "fps       8 fps 2, 4.8 fps 1, 10 fps 1" in text
    assert "sizes     64x48 2, 47x33 1, 63x45 1" in text
    assert "codecs    h264 3 (" in text and ", vp9 1 (" in text
    assert "height" not in text and "width" not in text
    assert main(["info", str(packed), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["video"] == clips


def test_info_reads_a_bounded_sample_of_clips(packed: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    monkeypatch.setattr(type(VIDEO), "codecs_read", 2)
    info = dataset_info(packed)
    assert info["codecs_sampled"] == 2 and sum(info["codecs"].values()) == 2
    assert "(of 2 records sampled evenly)" in format_info(info)


def test_verify_decode_decodes_each_clip(packed: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(packed), "--decode"]) == 0
    assert "all intact" in capsys.readouterr().out
    with open_dataset(packed) as ds:
        victim = next(i for i in range(len(ds)) if ds.path(i).endswith("h264.mp4"))
        record, where = bytes(ds.record(victim)), ds.path(victim)
    shard = next(packed.glob("*.mdb"))
    raw = bytearray(shard.read_bytes())
    at = raw.index(record)
    # the frames overwritten (the container's head kept), as a disk fault would
    raw[at + 64: at + len(record)] = np.random.default_rng(0).integers(
        0, 256, len(record) - 64, np.uint8).tobytes()
    shard.write_bytes(bytes(raw))
    assert main(["verify", str(packed), "--decode"]) == 1
    said = capsys.readouterr()
    assert where in said.out + said.err


def test_the_kind_verifies_by_a_whole_decode(clips: dict[str, bytes]) -> None:
    """verify --decode's own check: a clip cut short is named, whatever its crc says."""
    spec = type("Spec", (), {"name": "video", "kind": VIDEO})()
    good = clips["h264"]
    assert VIDEO.verify(spec, good, (48, 64), lambda _: None) is None
    problem = VIDEO.verify(spec, good[: len(good) // 2], (48, 64), lambda _: None)
    assert problem is not None and "not a readable video container" in problem
    assert VIDEO.verify(spec, b"junk", (1, 1), None) is None  # without --decode: not opened


def test_an_unpacked_folder_of_videos_gets_the_packdata_command(
        tmp_path: Path, clips: dict[str, bytes], capsys: pytest.CaptureFixture[str]) -> None:
    from fastloader import FastLoader

    write_tree(tmp_path / "videos", clips)
    with pytest.raises(DatasetNotFoundError, match=r"is a folder of videos, not a packed "
                                                   r"dataset.*fastloader\.pack\("):
        FastLoader(tmp_path / "videos")
    assert main(["info", str(tmp_path / "videos")]) == 2
    err = capsys.readouterr().err
    assert "is a folder of videos, not a packed dataset" in err
    assert f"packdata {tmp_path / 'videos'} {tmp_path / 'videos.lmdb'}" in err


def test_help_names_the_video_source() -> None:
    done = packdata("--help")
    text = " ".join(done.stdout.split())
    assert "UCF101 style tree; --source-format videofolder" in text
    assert "class folders of clips or videos" in text
    assert all(ext in text for ext in VIDEO_EXTENSIONS)
