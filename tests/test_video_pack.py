"""Video from every source: class folders (Kinetics/UCF101), tables with a video column (CSV,
TSV, JSONL, Parquet, Hugging Face Video()), WebDataset .mp4/.webm/.mkv members and Python
samples; the clips stored byte for byte with their probed meta, `packdata info`'s account,
`verify --decode`, a broken clip refused by name or skipped, and the unpacked folder's advice."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastloader.decode import video
from fastloader.decode.video import VIDEO_EXTENSIONS
from fastloader.errors import DatasetNotFoundError, PackError
from fastloader.format.kinds import VIDEO
from fastloader.format.kinds.video import META
from fastloader.format.open import open_dataset
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package
from fastloader.pack.cli.main import main
from fastloader.pack.maintain.info import dataset_info, format_info
from videogen import make_clip

av = pytest.importorskip("av", reason="PyAV (the video extra) is a test dependency")

# name -> (make_clip options, suffix): H.264 and VP9, even and odd sizes, a variable rate
CLIPS = {
    "h264": (dict(codec="libx264", frames=24, width=64, height=48), ".mp4"),
    "h264_odd": (dict(codec="libx264", frames=10, width=63, height=45, rate=10), ".mp4"),
    "vp9_odd": (dict(codec="libvpx-vp9", frames=16, width=47, height=33), ".webm"),
    "h264_vfr": (dict(codec="libx264", frames=6, pts=[0, 10, 13, 30, 55, 90]), ".mov"),
}
# class -> its clips (names of CLIPS), as a Kinetics-style tree holds them
TREE = {"jumping": ["h264", "vp9_odd"], "running": ["h264_odd"], "sitting": ["h264_vfr"]}


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    return {name: make_clip(**options) for name, (options, _) in CLIPS.items()}


def _remux(data: bytes, container: str) -> bytes:
    """The clip's packets in another container (Matroska ...), not re-encoded."""
    out = io.BytesIO()
    with av.open(io.BytesIO(data)) as src, av.open(out, "w", format=container) as dst:
        stream = dst.add_stream_from_template(src.streams.video[0])
        for packet in src.demux(src.streams.video[0]):
            if packet.dts is not None:
                packet.stream = stream
                dst.mux(packet)
    return out.getvalue()


def _tree(top: Path, clips: dict[str, bytes]) -> dict[str, bytes]:
    """A class-folder tree of the clips; relative path -> its bytes."""
    want = {}
    for label, names in TREE.items():
        (top / label).mkdir(parents=True)
        for name in names:
            relative = f"{label}/{name}{CLIPS[name][1]}"
            (top / relative).write_bytes(clips[name])
            want[relative] = clips[name]
    (top / "README.txt").write_text("not a clip")
    return want


def _check_meta(ds: Any, field: str) -> None:
    """Each clip's meta row is what decode/video.probe says of its stored bytes."""
    meta = ds.columns.meta(field)
    assert meta.shape == (len(ds), len(META))
    for i in range(len(ds)):
        info = video.probe(ds.sample(i)[field])
        assert meta[i].tolist() == [
            info.width, info.height, info.frames, info.time_base.numerator,
            info.time_base.denominator, info.duration_pts, len(info.keyframes),
            int(info.pts[0])]


def _packdata(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", *args],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("how", ["python", "cli", "cli_forced"])
def test_class_folders_of_videos(tmp_path: Path, clips: dict[str, bytes], how: str) -> None:
    want = _tree(tmp_path / "kinetics", clips)
    dst = tmp_path / "out.lmdb"
    if how == "python":
        pack(tmp_path / "kinetics", dst)
    else:
        forced = ["--source-format", "videofolder"] if how == "cli_forced" else []
        done = _packdata(str(tmp_path / "kinetics"), str(dst), *forced)
        assert done.returncode == 0, done.stderr
    with open_dataset(dst) as ds:
        assert {n: s.kind for n, s in ds.fields.items()} == {"video": "video", "label": "int"}
        assert ds.image_field == "video"
        assert ds.classes == sorted(TREE)
        assert ds.manifest.options["source"]["kind"] == "videofolder"
        got = {ds.path(i): (ds.sample(i)["video"], ds.classes[int(ds.sample(i)["label"])])
               for i in range(len(ds))}
        _check_meta(ds, "video")
    assert {p: v[0] for p, v in got.items()} == want  # byte for byte, never re-encoded
    assert all(p.startswith(label + "/") for p, (_, label) in got.items())


def test_the_meta_is_the_clips_own(tmp_path: Path, clips: dict[str, bytes]) -> None:
    """Frames, size and duration against what the clips were made with."""
    _tree(tmp_path / "t", clips)
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
    _tree(tmp_path / "t", clips)
    (tmp_path / "t" / "stray.mp4").write_bytes(clips["h264"])
    with pytest.raises(PackError, match=r"'stray\.mp4' is not in a class folder; a folder of "
                                        r"videos holds one sub-folder per class"):
        pack(tmp_path / "t", tmp_path / "out.lmdb")


def test_a_tree_of_audio_and_video_is_not_guessed(tmp_path: Path,
                                                  clips: dict[str, bytes]) -> None:
    """Either reading drops the other medium's files: refused naming both, unless forced."""
    from audiogen import clip

    _tree(tmp_path / "t", clips)
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
    _tree(tmp_path / "t", clips)
    broken = tmp_path / "t" / "running" / "cut.mp4"
    good = clips["h264"]
    broken.write_bytes(good[: len(good) // 2] if damage == "cut" else _frames_zeroed(good))
    if how == "python":
        with pytest.raises(PackError, match=rf"running/cut\.mp4.*field 'video'.*"
                                            rf"{BROKEN[damage]}"):
            pack(tmp_path / "t", tmp_path / "a.lmdb")
        pack(tmp_path / "t", tmp_path / "b.lmdb", skip_bad=True)
    else:
        refused = _packdata(str(tmp_path / "t"), str(tmp_path / "a.lmdb"))
        assert refused.returncode == 2 and "running/cut.mp4" in refused.stderr
        assert BROKEN[damage] in refused.stderr
        assert "--skip-bad" in refused.stderr
        done = _packdata(str(tmp_path / "t"), str(tmp_path / "b.lmdb"), "--skip-bad")
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


def _write_table(path: Path, rows: list[dict[str, Any]]) -> None:
    kind = path.suffix.lstrip(".")
    if kind in ("csv", "tsv"):
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, list(rows[0]), delimiter="," if kind == "csv" else "\t")
            writer.writeheader()
            writer.writerows(rows)
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)


def _clip_files(folder: Path, clips: dict[str, bytes]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (_, suffix) in CLIPS.items():
        paths.append(folder / f"{name}{suffix}")
        paths[-1].write_bytes(clips[name])
    return paths


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
@pytest.mark.parametrize("column", ["video", "video_path", "video_filepath", "clip"])
def test_a_table_with_a_video_column(tmp_path: Path, clips: dict[str, bytes], kind: str,
                                     column: str) -> None:
    """By name, or (`clip`) by its cells all naming video files; captions and ids kept."""
    paths = _clip_files(tmp_path / "clips", clips)
    rows = [{column: f"clips/{p.name}", "caption": f"a clip, {i}", "views": i * 7}
            for i, p in enumerate(paths)]
    _write_table(tmp_path / f"t.{kind}", rows)
    pack(tmp_path / f"t.{kind}", tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert {n: s.kind for n, s in ds.fields.items()} == {
            "video": "video", "caption": "text", "views": "int"}
        assert ds.image_field == "video"
        samples = [ds.sample(i) for i in range(len(ds))]
        _check_meta(ds, "video")
    assert [s["video"] for s in samples] == [p.read_bytes() for p in paths]
    assert [s["caption"] for s in samples] == [f"a clip, {i}" for i in range(len(paths))]
    assert [int(s["views"]) for s in samples] == [i * 7 for i in range(len(paths))]


@pytest.mark.parametrize("column", ["video", "video_path", "video_filepath"])
def test_a_video_column_by_name_holds_files_of_any_name(tmp_path: Path, clips: dict[str, bytes],
                                                        column: str) -> None:
    """Named like a video column, its cells need no video suffix (content-hashed names)."""
    paths = []
    for i, data in enumerate(clips.values()):
        paths.append(tmp_path / "blobs" / f"{i:04x}")
        paths[-1].parent.mkdir(exist_ok=True)
        paths[-1].write_bytes(data)
    _write_table(tmp_path / "t.jsonl", [{column: f"blobs/{p.name}", "caption": "c"}
                                        for p in paths])
    pack(tmp_path / "t.jsonl", tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert ds.image_field == "video" and ds.fields["video"].kind == "video"
        assert [ds.sample(i)["video"] for i in range(len(ds))] == list(clips.values())


def test_a_table_row_of_a_broken_clip_is_named(tmp_path: Path, clips: dict[str, bytes]) -> None:
    paths = _clip_files(tmp_path / "clips", clips)
    paths[1].write_bytes(b"\x00\x00\x00\x18ftypmp42 not a movie")
    _write_table(tmp_path / "t.csv", [{"video": f"clips/{p.name}", "caption": "c"}
                                      for p in paths])
    with pytest.raises(PackError, match=r"t\.csv line 3.*field 'video'"):
        pack(tmp_path / "t.csv", tmp_path / "a.lmdb")
    pack(tmp_path / "t.csv", tmp_path / "b.lmdb", skip_bad=True)
    with open_dataset(tmp_path / "b.lmdb") as ds:
        assert len(ds) == len(paths) - 1


@pytest.mark.parametrize("embed", [True, False])
def test_a_hugging_face_video_feature_in_parquet(tmp_path: Path, clips: dict[str, bytes],
                                                 embed: bool) -> None:
    """Parquet written by `datasets` with a Video() column (no torchcodec needed to write it):
    its stored bytes are packed (the path where it holds none)."""
    import datasets

    paths = _clip_files(tmp_path / "clips", clips)
    # Video() keeps bytes only beside a path that is not a local file (as the Hub's are)
    cells = [{"bytes": p.read_bytes(), "path": p.name} if embed else
             {"bytes": None, "path": str(p)} for p in paths]
    table = datasets.Dataset.from_dict(
        {"clip": cells, "caption": [f"c{i}" for i in range(len(paths))]},
        features=datasets.Features({"clip": datasets.Video(decode=False),
                                    "caption": datasets.Value("string")}))
    table.to_parquet(str(tmp_path / "hf.parquet"))
    if embed:  # the stored bytes are read, not the paths
        (tmp_path / "clips").rename(tmp_path / "moved")
    pack(tmp_path / "hf.parquet", tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert {n: s.kind for n, s in ds.fields.items()} == {"video": "video", "caption": "text"}
        assert [ds.sample(i)["video"] for i in range(len(ds))] == list(clips.values())
        _check_meta(ds, "video")


def test_a_hugging_face_dataset_with_a_video_column(tmp_path: Path,
                                                    clips: dict[str, bytes]) -> None:
    """pack(datasets.Dataset): its Video() column is read undecoded, its bytes the records."""
    import datasets

    cells = [{"bytes": data, "path": f"{name}.mp4"} for name, data in clips.items()]
    table = datasets.Dataset.from_dict(
        {"video": cells, "label": [0, 1, 0, 1]},
        features=datasets.Features({"video": datasets.Video(decode=False),
                                    "label": datasets.ClassLabel(names=["a", "b"])}))
    pack(table, tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert ds.image_field == "video" and ds.classes == ["a", "b"]
        assert [ds.sample(i)["video"] for i in range(len(ds))] == list(clips.values())


def test_webdataset_tar_members(tmp_path: Path, clips: dict[str, bytes]) -> None:
    """.mp4, .webm and .mkv members are video fields (named by extension, as WebDataset
    names them), their .txt/.cls/.json beside them as ever."""
    members = {"mp4": clips["h264"], "webm": clips["vp9_odd"],
               "mkv": _remux(clips["h264_odd"], "matroska")}
    for ext, data in members.items():
        tar_path = tmp_path / f"{ext}-000.tar"
        with tarfile.open(tar_path, "w") as tar:
            for i in range(3):
                for name, blob in ((f"s{i:03d}.{ext}", data), (f"s{i:03d}.txt", f"cap {i}"),
                                   (f"s{i:03d}.cls", str(i % 2)),
                                   (f"s{i:03d}.json", json.dumps({"i": i}))):
                    raw = blob if isinstance(blob, bytes) else blob.encode()
                    info = tarfile.TarInfo(name)
                    info.size = len(raw)
                    tar.addfile(info, io.BytesIO(raw))
        pack(tar_path, tmp_path / f"{ext}.lmdb")
        with open_dataset(tmp_path / f"{ext}.lmdb") as ds:
            assert {n: s.kind for n, s in ds.fields.items()} == {
                ext: "video", "txt": "text", "cls": "int", "json": "json"}
            assert ds.image_field == ext
            samples = [ds.sample(i) for i in range(3)]
            _check_meta(ds, ext)
        assert [s[ext] for s in samples] == [data] * 3
        assert [s["txt"] for s in samples] == ["cap 0", "cap 1", "cap 2"]
        assert [s["json"] for s in samples] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_python_samples_of_bytes_and_paths(tmp_path: Path, clips: dict[str, bytes]) -> None:
    paths = _clip_files(tmp_path / "clips", clips)
    samples = [{"video": p.read_bytes() if i % 2 else str(p), "label": i % 2}
               for i, p in enumerate(paths)]
    pack(samples, tmp_path / "out.lmdb", fields={"video": "video", "label": "int"})
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert [ds.sample(i)["video"] for i in range(len(ds))] == list(clips.values())
        assert [int(ds.sample(i)["label"]) for i in range(len(ds))] == [0, 1, 0, 1]
        _check_meta(ds, "video")


@pytest.fixture()
def packed(tmp_path: Path, clips: dict[str, bytes]) -> Path:
    _tree(tmp_path / "t", clips)
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

    _tree(tmp_path / "videos", clips)
    with pytest.raises(DatasetNotFoundError, match=r"is a folder of videos, not a packed "
                                                   r"dataset.*fastloader\.pack\("):
        FastLoader(tmp_path / "videos")
    assert main(["info", str(tmp_path / "videos")]) == 2
    err = capsys.readouterr().err
    assert "is a folder of videos, not a packed dataset" in err
    assert f"packdata {tmp_path / 'videos'} {tmp_path / 'videos.lmdb'}" in err


def test_help_names_the_video_source() -> None:
    done = _packdata("--help")
    text = " ".join(done.stdout.split())
    assert "UCF101 style tree; --source-format videofolder" in text
    assert "class folders of clips or videos" in text
    assert all(ext in text for ext in VIDEO_EXTENSIONS)


def test_no_native_extension_is_needed(tmp_path: Path, clips: dict[str, bytes]) -> None:
    """The pack side of video is Python and PyAV: a tree packs the same with the extension
    disabled (the packdata process reads FASTLOADER_DISABLE_NATIVE at start-up)."""
    want = _tree(tmp_path / "t", clips)
    done = subprocess.run(
        [sys.executable, "-m", "fastloader.pack.cli.main", str(tmp_path / "t"),
         str(tmp_path / "out.lmdb")], capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "FASTLOADER_DISABLE_NATIVE": "1"})
    assert done.returncode == 0, done.stderr
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert {ds.path(i): ds.sample(i)["video"] for i in range(len(ds))} == want
