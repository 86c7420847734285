"""Video from class folders (Kinetics/UCF101) and Python samples: the clips stored byte for
byte with their probed meta, the CLI and pack(), a loose or broken clip refused by name or
skipped, a tree of audio and video not guessed."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastloader.errors import PackError
from fastloader.format.open import open_dataset
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package
from videogen import make_clip
from videotree import CLIPS, TREE, check_meta, make_clips, packdata, write_clips, write_tree

av = pytest.importorskip("av", reason="PyAV (the video extra) is a test dependency")


pytestmark = pytest.mark.native_neutral


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    return make_clips()


@pytest.mark.parametrize("how", ["python", "cli", "cli_forced"])
def test_class_folders_of_videos(tmp_path: Path, clips: dict[str, bytes], how: str) -> None:
    want = write_tree(tmp_path / "kinetics", clips)
    dst = tmp_path / "out.lmdb"
    if how == "python":
        pack(tmp_path / "kinetics", dst)
    else:
        forced = ["--source-format", "videofolder"] if how == "cli_forced" else []
        done = packdata(str(tmp_path / "kinetics"), str(dst), *forced)
        assert done.returncode == 0, done.stderr
    with open_dataset(dst) as ds:
        assert {n: s.kind for n, s in ds.fields.items()} == {"video": "video", "label": "int"}
        assert ds.image_field == "video"
        assert ds.classes == sorted(TREE)
        assert ds.manifest.options["source"]["kind"] == "videofolder"
        got = {ds.path(i): (ds.sample(i)["video"], ds.classes[int(ds.sample(i)["label"])])
               for i in range(len(ds))}
        check_meta(ds, "video")
    assert {p: v[0] for p, v in got.items()} == want  # byte for byte, never re-encoded
    assert all(p.startswith(label + "/") for p, (_, label) in got.items())


def test_the_meta_is_the_clips_own(tmp_path: Path, clips: dict[str, bytes]) -> None:
    """Frames, size and duration against what the clips were made with."""
    write_tree(tmp_path / "t", clips)
    pack(tmp_path / "t", tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        meta = {ds.path(i).rpartition("/")[2].partition(".")[0]: row.tolist()
                for i, row in enumerate(ds.columns.meta("video"))}
    for name, (options, _) in CLIPS.items():
        width, height, frames, num, den, span = meta[name][:6]
        assert (width, height, frames) == (options.get("width", 64), options.get("height", 48),
                                           options["frames"])
        rate = options.get("rate", 8)
        last = options["pts"][-1] if "pts" in options else (frames - 1) * 10
        # units of 1/(rate*10) s: the container's time base may be finer, never coarser
        assert span * num / den == pytest.approx((last + 10) / (rate * 10))


def test_a_loose_video_is_refused_naming_it(tmp_path: Path, clips: dict[str, bytes]) -> None:
    write_tree(tmp_path / "t", clips)
    (tmp_path / "t" / "stray.mp4").write_bytes(clips["h264"])
    with pytest.raises(PackError, match=r"'stray\.mp4' is not in a class folder; a folder of "
                                        r"videos holds one sub-folder per class"):
        pack(tmp_path / "t", tmp_path / "out.lmdb")


def test_a_tree_of_audio_and_video_is_not_guessed(tmp_path: Path,
                                                  clips: dict[str, bytes]) -> None:
    """Either reading drops the other medium's files: refused naming both, unless forced."""
    from audiogen import clip

    write_tree(tmp_path / "t", clips)
    (tmp_path / "t" / "running" / "x.wav").write_bytes(clip(16000, 0.2))
    with pytest.raises(PackError, match=r"both audio clips \(such as running/x\.wav\) and "
                                        r"videos \(such as .*\.(mp4|webm|mov)\).*"
                                        r"source_format=\"videofolder\""):
        pack(tmp_path / "t", tmp_path / "a.lmdb")
    pack(tmp_path / "t", tmp_path / "b.lmdb", source_format="videofolder")
    with open_dataset(tmp_path / "b.lmdb") as ds:
        assert ds.image_field == "video" and len(ds) == sum(map(len, TREE.values()))


def test_a_tree_of_images_stays_an_image_tree(tmp_path: Path, clips: dict[str, bytes]) -> None:
    """A video beside images is not a video tree: the image tree ignores it, as before."""
    from PIL import Image

    (tmp_path / "t" / "cats").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(tmp_path / "t" / "cats" / "a.png")
    (tmp_path / "t" / "cats" / "b.mp4").write_bytes(clips["h264"])
    pack(tmp_path / "t", tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert ds.image_field == "image" and len(ds) == 1


def _frames_zeroed(data: bytes) -> bytes:
    """The clip with its 4th frame's packet zeroed: it demuxes whole, its decode fails."""
    with av.open(io.BytesIO(data)) as container:
        packets = [p for p in container.demux(video=0) if p.size]
        at, size = packets[3].pos, packets[3].size
    return data[:at] + bytes(size) + data[at + size:]


# how a clip breaks -> what the refusal says
BROKEN = {"cut": "not a readable video container",  # its index (moov) is lost
          "frames": "decoding failed after 1 frames"}


@pytest.mark.parametrize("damage", sorted(BROKEN))
@pytest.mark.parametrize("how", ["python", "cli"])
def test_a_broken_clip_is_refused_by_name_or_skipped(tmp_path: Path, clips: dict[str, bytes],
                                                      how: str, damage: str) -> None:
    write_tree(tmp_path / "t", clips)
    broken = tmp_path / "t" / "running" / "cut.mp4"
    good = clips["h264"]
    broken.write_bytes(good[: len(good) // 2] if damage == "cut" else _frames_zeroed(good))
    if how == "python":
        with pytest.raises(PackError, match=rf"running/cut\.mp4: field 'video' \(video "
                                            rf"\(encoded clip\)\): {BROKEN[damage]}"):
            pack(tmp_path / "t", tmp_path / "a.lmdb")
        pack(tmp_path / "t", tmp_path / "b.lmdb", skip_bad=True)
    else:
        refused = packdata(str(tmp_path / "t"), str(tmp_path / "a.lmdb"))
        assert refused.returncode == 2 and "running/cut.mp4" in refused.stderr
        assert BROKEN[damage] in refused.stderr
        assert "--skip-bad" in refused.stderr
        done = packdata(str(tmp_path / "t"), str(tmp_path / "b.lmdb"), "--skip-bad")
        assert done.returncode == 0, done.stderr
    assert not (tmp_path / "a.lmdb" / "manifest.json").exists()
    skipped = json.loads((tmp_path / "b.lmdb" / "skipped.json").read_text())
    assert [s["sample"] for s in skipped] == ["running/cut.mp4"]
    with open_dataset(tmp_path / "b.lmdb") as ds:
        assert len(ds) == sum(map(len, TREE.values()))


def test_a_clip_cut_short_with_its_index_first_is_refused(tmp_path: Path) -> None:
    """Faststart: the index survives the cut, the frames do not; the frame count says so."""
    whole = make_clip(frames=24, faststart_path=str(tmp_path / "fs.mp4"))
    (tmp_path / "t" / "a").mkdir(parents=True)
    (tmp_path / "t" / "a" / "cut.mp4").write_bytes(whole[: len(whole) * 2 // 3])
    with pytest.raises(PackError, match=r"a/cut\.mp4.*truncated"):
        pack(tmp_path / "t", tmp_path / "out.lmdb")


def test_python_samples_of_bytes_and_paths(tmp_path: Path, clips: dict[str, bytes]) -> None:
    paths = write_clips(tmp_path / "clips", clips)
    samples = [{"video": p.read_bytes() if i % 2 else str(p), "label": i % 2}
               for i, p in enumerate(paths)]
    pack(samples, tmp_path / "out.lmdb", fields={"video": "video", "label": "int"})
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert [ds.sample(i)["video"] for i in range(len(ds))] == list(clips.values())
        assert [int(ds.sample(i)["label"]) for i in range(len(ds))] == [0, 1, 0, 1]
        check_meta(ds, "video")


def test_no_native_extension_is_needed(tmp_path: Path, clips: dict[str, bytes]) -> None:
    """The pack side of video is Python and PyAV: a tree packs the same with the extension
    disabled (the packdata process reads FASTLOADER_DISABLE_NATIVE at start-up)."""
    want = write_tree(tmp_path / "t", clips)
    done = subprocess.run(
        [sys.executable, "-m", "fastloader.pack.cli.main", str(tmp_path / "t"),
         str(tmp_path / "out.lmdb")], capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "FASTLOADER_DISABLE_NATIVE": "1"})
    assert done.returncode == 0, done.stderr
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert {ds.path(i): ds.sample(i)["video"] for i in range(len(ds))} == want
