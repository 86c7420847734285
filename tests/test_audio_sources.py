"""Audio from every source: a table's clip path column (CSV, TSV, JSONL, Parquet; NeMo's
audio_filepath), WebDataset tars of .flac/.wav/.mp3/.ogg/.opus members, Python samples of
paths; the clips stored as given, a bad one named by its line or member."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from pathlib import Path

import pytest

from audiogen import clip
from fastloader import Audio, FastLoader, open_dataset
from fastloader.errors import PackError
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package

sf = pytest.importorskip("soundfile", reason="soundfile (the audio extra) is a test dependency")

CLIPS = [("flac", 16000, 1, 0.5), ("wav", 8000, 2, 0.3), ("mp3", 22050, 1, 1.0),
         ("ogg", 32000, 1, 0.4), ("opus", 48000, 2, 0.6)]


def _files(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (fmt, rate, ch, seconds) in enumerate(CLIPS):
        path = folder / f"u{i}.{fmt}"
        path.write_bytes(clip(rate, seconds, ch, fmt, seed=i))
        paths.append(path)
    return paths


def _check(root: Path, paths: list[Path], text_field: str = "text") -> None:
    with open_dataset(root) as ds:
        assert len(ds) == len(paths)
        meta = ds.columns.meta(ds.image_field)
        for i in range(len(ds)):
            sample = ds.sample(i)
            k = int(sample[text_field].rpartition(" ")[2])
            data = paths[k].read_bytes()
            assert sample[ds.image_field] == data
            info = sf.info(io.BytesIO(data))
            assert meta[i].tolist() == [info.samplerate, info.channels, info.frames]
    with FastLoader(root, batch_size=2, device="cpu", audio=Audio(sample_rate=16000)) as loader:
        assert sum(batch[ds.image_field][0].shape[0] for batch in loader) == len(paths)


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
def test_a_table_with_an_audio_column(tmp_path: Path, kind: str) -> None:
    paths = _files(tmp_path / "clips")
    rows = [{"audio": f"clips/{p.name}", "text": f"utt {i}"} for i, p in enumerate(paths)]
    table = tmp_path / f"t.{kind}"
    if kind in ("csv", "tsv"):
        with table.open("w", newline="") as f:
            writer = csv.DictWriter(f, ["audio", "text"], delimiter="," if kind == "csv"
                                    else "\t")
            writer.writeheader()
            writer.writerows(rows)
    elif kind == "jsonl":
        table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), table)
    pack(table, tmp_path / "out.lmdb")
    _check(tmp_path / "out.lmdb", paths)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_table_of_clips_is_cut_by_the_clips_bytes(tmp_path: Path, kind: str) -> None:
    paths = _files(tmp_path / "clips")
    rows = [{"audio": f"clips/{p.name}", "text": f"utt {i}"} for i, p in enumerate(paths)]
    table = tmp_path / f"t.{kind}"
    if kind == "csv":
        table.write_text("audio,text\n" + "".join(f"{r['audio']},{r['text']}\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), table)
    smallest = min(p.stat().st_size for p in paths)
    made = pack(table, tmp_path / "out.lmdb", shard_size=smallest)  # one clip fills a shard
    assert [s.count for s in made.shards] == [1] * len(paths)
    _check(tmp_path / "out.lmdb", paths)


def test_a_nemo_manifest(tmp_path: Path) -> None:
    paths = _files(tmp_path / "clips")
    table = tmp_path / "manifest.jsonl"
    table.write_text("".join(json.dumps({"audio_filepath": f"clips/{p.name}", "duration": 1.0,
                                         "text": f"utt {i}"}) + "\n"
                             for i, p in enumerate(paths)))
    pack(table, tmp_path / "out.h5")
    _check(tmp_path / "out.h5", paths)
    with open_dataset(tmp_path / "out.h5") as ds:
        assert ds.image_field == "audio"  # one name for the clips, whatever the column


def test_a_declared_audio_column_with_another_name(tmp_path: Path) -> None:
    paths = _files(tmp_path / "clips")
    table = tmp_path / "t.csv"
    table.write_text("path,text\n" + "".join(f"clips/{p.name},utt {i}\n"
                                             for i, p in enumerate(paths)))
    pack(table, tmp_path / "out.lmdb", fields={"path": "audio"})
    _check(tmp_path / "out.lmdb", paths)


def test_a_bad_clip_in_a_table_is_named_by_its_line(tmp_path: Path) -> None:
    paths = _files(tmp_path / "clips")
    paths[2].write_bytes(b"RIFF not really a wave")
    table = tmp_path / "t.csv"
    table.write_text("audio,text\n" + "".join(f"clips/{p.name},utt {i}\n"
                                              for i, p in enumerate(paths)))
    with pytest.raises(PackError, match=r"t\.csv line 4: field 'audio'"):
        pack(table, tmp_path / "out.lmdb")
    pack(table, tmp_path / "out.lmdb", skip_bad=True)
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert len(ds) == len(paths) - 1


@pytest.mark.parametrize("fmt", ["flac", "wav", "mp3", "ogg", "opus"])
def test_webdataset_tar_members(tmp_path: Path, fmt: str) -> None:
    rate = 16000
    datas = [clip(rate, 0.3 + i / 10, 1 + i % 2, fmt, seed=i) for i in range(3)]
    tar_path = tmp_path / "shard-000.tar"
    with tarfile.open(tar_path, "w") as tar:
        for i, data in enumerate(datas):
            for name, blob in ((f"s{i:03d}.{fmt}", data), (f"s{i:03d}.txt", f"utt {i}".encode())):
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    pack(tar_path, tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert ds.image_field == fmt
        assert [ds.sample(i)[fmt] for i in range(3)] == datas
        assert [ds.sample(i)["txt"] for i in range(3)] == ["utt 0", "utt 1", "utt 2"]
        assert ds.columns.meta(fmt)[:, 1].tolist() == [1, 2, 1]


def test_python_samples_of_paths(tmp_path: Path) -> None:
    paths = _files(tmp_path / "clips")
    pack([{"audio": str(p), "text": f"utt {i}"} for i, p in enumerate(paths)],
         tmp_path / "out.lmdb", fields={"audio": "audio", "text": "text"})
    _check(tmp_path / "out.lmdb", paths)


@pytest.mark.parametrize("embed", [True, False])
def test_hugging_face_audio_cells(tmp_path: Path, embed: bool) -> None:
    import datasets

    paths = _files(tmp_path / "clips")
    cells = [{"bytes": p.read_bytes() if embed else None, "path": str(p)}
             for p in paths]
    table = datasets.Dataset.from_dict(  # Audio()'s own storage: a {bytes, path} struct
        {"audio": cells, "text": [f"utt {i}" for i in range(len(paths))]}).cast_column(
        "audio", datasets.Audio(decode=False))
    assert isinstance(table.features["audio"], datasets.Audio)
    table.to_parquet(str(tmp_path / "hf.parquet"))
    if embed:  # the stored bytes are read, not the path
        (tmp_path / "clips").rename(tmp_path / "moved")
        paths = [tmp_path / "moved" / p.name for p in paths]
    pack(tmp_path / "hf.parquet", tmp_path / "out.lmdb")
    _check(tmp_path / "out.lmdb", paths)


@pytest.mark.parametrize("embed", [True, False])
def test_a_hugging_face_dataset_with_an_audio_column(tmp_path: Path, embed: bool) -> None:
    """pack(datasets.Dataset, dst): its Audio() column (decoding on, as load_dataset gives
    it) is cast to decode=False and its stored bytes packed as the records, no Image needed."""
    import datasets

    paths = _files(tmp_path / "clips")
    cells = [{"bytes": p.read_bytes() if embed else None, "path": str(p)} for p in paths]
    table = datasets.Dataset.from_dict(
        {"audio": cells, "text": [f"utt {i}" for i in range(len(paths))]}).cast_column(
        "audio", datasets.Audio())
    assert table.features["audio"].decode
    pack(table, tmp_path / "out.lmdb")
    _check(tmp_path / "out.lmdb", paths)


def test_a_folder_of_class_folders_of_clips(tmp_path: Path) -> None:
    top = tmp_path / "commands"
    want = {}
    for k, name in enumerate(["yes", "no", "_background_noise_"]):
        (top / name).mkdir(parents=True)
        for i in range(2):
            data = clip(16000, 0.2 + i / 10, 1, "wav", seed=10 * k + i)
            (top / name / f"c{i}.wav").write_bytes(data)
            want[f"{name}/c{i}.wav"] = data
    (top / "README.md").write_text("not a clip")
    pack(top, tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert ds.classes == ["_background_noise_", "no", "yes"]
        got = {ds.path(i): (ds.sample(i)["audio"], ds.classes[int(ds.sample(i)["label"])])
               for i in range(len(ds))}
    assert {p: v[0] for p, v in got.items()} == want
    assert all(p.startswith(label + "/") for p, (_, label) in got.items())
    with FastLoader(tmp_path / "out.lmdb", batch_size=6, device="cpu", audio=Audio()) as loader:
        (waves, _), labels = next(iter(loader))
    assert waves.shape[0] == 6 and sorted(labels.tolist()) == [0, 0, 1, 1, 2, 2]
    (top / "loose.wav").write_bytes(clip(16000, 0.1))
    with pytest.raises(PackError, match="not in a class folder"):
        pack(top, tmp_path / "again.lmdb")
