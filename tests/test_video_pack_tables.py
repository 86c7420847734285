"""Video from tables (CSV, TSV, JSONL, Parquet; a column by name or by its cells), Hugging
Face Video() features (Parquet written by `datasets`, and pack(Dataset)) and WebDataset
.mp4/.webm/.mkv members: the clips stored byte for byte, the other columns kept."""

from __future__ import annotations

import csv
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from fastloader.errors import PackError
from fastloader.format.open import open_dataset
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package
from videotree import check_meta, make_clips, write_clips

av = pytest.importorskip("av", reason="PyAV (the video extra) is a test dependency")


pytestmark = pytest.mark.native_neutral


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    return make_clips()


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


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
@pytest.mark.parametrize("column", ["video", "video_path", "video_filepath", "clip"])
def test_a_table_with_a_video_column(tmp_path: Path, clips: dict[str, bytes], kind: str,
                                     column: str) -> None:
    """By name, or (`clip`) by its cells all naming video files; captions and ids kept."""
    paths = write_clips(tmp_path / "clips", clips)
    rows = [{column: f"clips/{p.name}", "caption": f"a clip, {i}", "views": i * 7}
            for i, p in enumerate(paths)]
    _write_table(tmp_path / f"t.{kind}", rows)
    pack(tmp_path / f"t.{kind}", tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert {n: s.kind for n, s in ds.fields.items()} == {
            "video": "video", "caption": "text", "views": "int"}
        assert ds.image_field == "video"
        samples = [ds.sample(i) for i in range(len(ds))]
        check_meta(ds, "video")
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
    paths = write_clips(tmp_path / "clips", clips)
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

    paths = write_clips(tmp_path / "clips", clips)
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
        check_meta(ds, "video")


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
            check_meta(ds, ext)
        assert [s[ext] for s in samples] == [data] * 3
        assert [s["txt"] for s in samples] == ["cap 0", "cap 1", "cap 2"]
        assert [s["json"] for s in samples] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_an_empty_media_cell_is_refused_naming_its_feature() -> None:
    """A Hugging Face Audio()/Video() cell with neither bytes nor a path says which it is."""
    from fastloader.format.fields import FieldSpec

    for kind, feature in (("video", "a Video()"), ("audio", "an Audio()")):
        spec = FieldSpec(kind, kind)
        with pytest.raises(ValueError, match=rf"is {re.escape(feature)} cell with neither"):
            spec.kind.from_cell(spec, {"bytes": None, "path": ""}, False)
        assert spec.kind.from_cell(spec, {"bytes": b"xy", "path": "a.mp4"}, False) == b"xy"
        assert spec.kind.from_cell(spec, {"bytes": None, "path": "a.mp4"}, False) == "a.mp4"
