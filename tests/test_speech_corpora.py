"""Speech corpora read as their own users read them: LibriSpeech (transcripts, speaker and
chapter), Common Voice split tables (text = sentence, every column kept), NeMo manifests (the
clips as field `audio`, as README's example reads them), a table whose clip column has any name
(known by its files), and a `datasets` save_to_disk folder. A layout recognised but read
another way is refused, naming its source format, in each interface's words."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import fastloader
from audiogen import clip, common_voice, librispeech, nemo_manifest
from fastloader import Audio, FastLoader, open_dataset
from fastloader.errors import PackError
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package
from fastloader.pack.cli.main import main

sf = pytest.importorskip("soundfile", reason="soundfile (the audio extra) is a test dependency")
SPEAKERS = {84: [121123, 121550], 174: [50561]}


def _samples(dst: Path) -> list[dict]:
    with open_dataset(dst) as ds:
        return [ds.sample(k) for k in range(len(ds))]


def _loads(dst: Path, fields: list[str]) -> int:
    with FastLoader(dst, batch_size=2, device="cpu", fields=fields,
                    audio=Audio(sample_rate=16000)) as loader:
        return sum(len(batch[0][1]) for batch in loader)


def test_a_librispeech_split_keeps_its_transcripts(tmp_path: Path) -> None:
    made = librispeech(tmp_path / "LibriSpeech" / "dev-clean", SPEAKERS)
    pack(tmp_path / "LibriSpeech" / "dev-clean", tmp_path / "ls.lmdb")
    got = _samples(tmp_path / "ls.lmdb")
    assert len(got) == len(made) == 6
    for sample in got:
        utterance = f"{sample['speaker']}-{sample['chapter']}-"
        matches = [u for u in made if u.startswith(utterance) and made[u][0] == sample["text"]]
        assert len(matches) == 1 and sample["audio"] == made[matches[0]][1]
    assert _loads(tmp_path / "ls.lmdb", ["audio", "text"]) == 6


def test_librispeech_from_its_root_or_one_speaker(tmp_path: Path) -> None:
    root = tmp_path / "LibriSpeech"
    librispeech(root / "dev-clean", SPEAKERS)
    pack(root, tmp_path / "root.lmdb")  # one split under the root: that split
    assert len(_samples(tmp_path / "root.lmdb")) == 6
    pack(root / "dev-clean" / "84", tmp_path / "one.lmdb")
    got = _samples(tmp_path / "one.lmdb")
    assert {s["speaker"] for s in got} == {84} and {s["chapter"] for s in got} == {121123,
                                                                                   121550}
    assert all(s["text"].startswith("WORDS OF 84 IN ") for s in got)
    librispeech(root / "test-clean", {61: [70968]})
    with pytest.raises(PackError, match="LibriSpeech splits dev-clean, test-clean; pack one"):
        pack(root, tmp_path / "both.lmdb")


def test_librispeech_lines_and_clips_that_do_not_match(tmp_path: Path) -> None:
    split = tmp_path / "dev-clean"
    librispeech(split, {84: [121123]})
    (split / "84" / "121123" / "84-121123-0001.flac").unlink()
    (split / "84" / "121123" / "84-121123-0009.flac").write_bytes(clip(16000, 0.1))
    with pytest.raises(PackError, match=r"84-121123\.trans\.txt line 2: names "
                                        r"84-121123-0001\.flac, which is not"):
        pack(split, tmp_path / "a.lmdb")
    made = pack(split, tmp_path / "b.lmdb", skip_bad=True)
    reasons = [s["reason"] for s in made.stats["skipped_samples"]]
    assert len(reasons) == 2 and "has no line in 84-121123.trans.txt" in reasons[1]


def test_librispeech_with_packdata_and_forced_as_file_groups(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    split = tmp_path / "dev-clean"
    librispeech(split, SPEAKERS)
    assert main([str(split), str(tmp_path / "ls.lmdb"), "--quiet", "--workers", "1"]) == 0
    assert all(s["text"].startswith("WORDS OF") for s in _samples(tmp_path / "ls.lmdb"))
    for kind in ("files", "audiofolder"):
        assert main([str(split), str(tmp_path / f"{kind}.lmdb"), "--workers", "1",
                     "--source-format", kind]) == 2
        err = capsys.readouterr().err
        assert "is a LibriSpeech folder" in err and "--source-format librispeech" in err
        assert "has no field" not in err and "source_format" not in err
        with pytest.raises(PackError, match='source_format="librispeech"'):
            pack(split, tmp_path / f"{kind}.lmdb", source_format=kind)


def test_a_common_voice_split_table(tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    language = tmp_path / "cv-corpus" / "en"
    rows = common_voice(language)
    pack(language / "train.tsv", tmp_path / "cv.lmdb")
    got = _samples(tmp_path / "cv.lmdb")
    assert [s["text"] for s in got] == [r["sentence"] for r in rows]  # quotes kept
    assert [s["client_id"] for s in got] == [r["client_id"] for r in rows]
    assert [s["up_votes"] for s in got] == [int(r["up_votes"]) for r in rows]
    assert [s["age"] for s in got] == [r["age"] for r in rows]
    assert [s["audio"] for s in got] == [(language / "clips" / r["path"]).read_bytes()
                                         for r in rows]
    assert _loads(tmp_path / "cv.lmdb", ["audio", "text"]) == len(rows)
    assert main([str(language / "dev.tsv"), str(tmp_path / "dev.lmdb"), "--quiet"]) == 0
    assert len(_samples(tmp_path / "dev.lmdb")) == 2
    with pytest.raises(PackError, match=r"Common Voice language folder; pack one split's "
                                        r"table: .*train\.tsv \(its splits: dev\.tsv, "
                                        r"train\.tsv\)"):
        pack(language, tmp_path / "all.lmdb")
    assert main([str(language / "train.tsv"), str(tmp_path / "t.lmdb"),
                 "--source-format", "tsv"]) == 2
    assert "--source-format commonvoice" in capsys.readouterr().err


def test_the_readme_nemo_example_as_written(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    written = nemo_manifest(tmp_path)
    fastloader.pack("train_manifest.jsonl", "speech.lmdb")
    loader = fastloader.FastLoader(
        "speech.lmdb", fields=["audio", "text"], shuffle=True, max_batch_seconds=200.0,
        audio=fastloader.Audio(sample_rate=16000, mono=True, crop_seconds=None,
                               random_crop=False), device="cpu")
    texts = []
    with loader:
        for (waves, lengths), batch_texts in loader:
            assert waves.shape[1] == 1 and len(lengths) == len(batch_texts)
            texts += list(batch_texts)
    assert sorted(texts) == [f"utterance {k}" for k in range(len(written))]


@pytest.mark.parametrize("column,kind", [("path", "csv"), ("path", "parquet"),
                                         ("file", "jsonl"), ("recording", "csv")])
def test_a_column_of_clip_files_is_audio_whatever_its_name(tmp_path: Path, column: str,
                                                           kind: str) -> None:
    (tmp_path / "clips").mkdir()
    written = []
    for k, fmt in enumerate(["wav", "flac", "mp3", "ogg", "opus"]):
        written.append(clip(16000, 0.2, 1, fmt, seed=k))
        (tmp_path / "clips" / f"{k}.{fmt}").write_bytes(written[-1])
    rows = [{column: f"clips/{k}.{fmt}", "text": f"t {k}"}
            for k, fmt in enumerate(["wav", "flac", "mp3", "ogg", "opus"])]
    table = tmp_path / f"t.{kind}"
    if kind == "csv":
        table.write_text(f"{column},text\n" + "".join(f"{r[column]},{r['text']}\n"
                                                      for r in rows))
    elif kind == "jsonl":
        table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), table)
    pack(table, tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert ds.image_field == "audio"
        assert [ds.sample(k)["audio"] for k in range(len(ds))] == written


def _saved(tmp_path: Path) -> tuple[object, list[bytes]]:
    datasets = pytest.importorskip("datasets")
    clips = [clip(16000, 0.2 + 0.1 * k, 1, "flac", seed=k) for k in range(3)]
    dataset = datasets.Dataset.from_dict(  # Audio()'s own storage: {bytes, path} structs
        {"audio": [{"bytes": c, "path": f"{k}.flac"} for k, c in enumerate(clips)],
         "text": [f"said {k}" for k in range(3)], "label": [0, 1, 0]}).cast_column(
        "audio", datasets.Audio(decode=False)).cast_column(
        "label", datasets.ClassLabel(names=["no", "yes"]))
    return dataset, clips


def test_a_save_to_disk_folder(tmp_path: Path) -> None:
    dataset, clips = _saved(tmp_path)
    dataset.save_to_disk(str(tmp_path / "saved"))  # type: ignore[attr-defined]
    pack(tmp_path / "saved", tmp_path / "a.lmdb")
    assert main([str(tmp_path / "saved"), str(tmp_path / "b.h5"), "--quiet"]) == 0
    for dst in ("a.lmdb", "b.h5"):
        got = _samples(tmp_path / dst)
        assert [s["audio"] for s in got] == clips
        assert [s["text"] for s in got] == ["said 0", "said 1", "said 2"]
        with open_dataset(tmp_path / dst) as ds:
            assert ds.classes == ["no", "yes"]


def test_a_saved_dataset_dict_names_its_splits(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    dataset, _ = _saved(tmp_path)
    datasets.DatasetDict({"train": dataset, "test": dataset}).save_to_disk(
        str(tmp_path / "dict"))
    with pytest.raises(PackError, match=r"saved DatasetDict \(splits: train, test\); pack one "
                                        r"split's folder, e.g. .*dict/train"):
        pack(tmp_path / "dict", tmp_path / "a.lmdb")
    pack(tmp_path / "dict" / "test", tmp_path / "a.lmdb")
    assert len(_samples(tmp_path / "a.lmdb")) == 3


def test_an_image_save_to_disk_folder(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    images = []
    for k in range(3):
        buffer = io.BytesIO()
        Image.new("RGB", (9 + k, 7), (50 * k, 20, 90)).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    dataset = datasets.Dataset.from_dict(
        {"image": [{"bytes": b, "path": None} for b in images], "label": [1, 0, 1]},
        features=datasets.Features({"image": datasets.Image(),
                                    "label": datasets.ClassLabel(names=["a", "b"])}))
    dataset.save_to_disk(str(tmp_path / "saved"))
    pack(tmp_path / "saved", tmp_path / "i.lmdb")
    with open_dataset(tmp_path / "i.lmdb") as ds:
        assert [bytes(ds.record(k)) for k in range(len(ds))] == images
        assert ds.classes == ["a", "b"]


def test_speech_corpora_in_separate_plan_shard_commit_steps(tmp_path: Path) -> None:
    """A shard run opens the source again from the plan (LibriSpeech, a save_to_disk
    folder), and packs what one run packs."""
    dataset, clips = _saved(tmp_path)
    dataset.save_to_disk(str(tmp_path / "saved"))  # type: ignore[attr-defined]
    made = librispeech(tmp_path / "dev-clean", SPEAKERS)
    for src, count in ((tmp_path / "saved", len(clips)), (tmp_path / "dev-clean", len(made))):
        dst = tmp_path / f"{src.name}.h5"
        assert main(["plan", str(src), str(dst), "--shard-size", "8K", "--quiet"]) == 0
        assert main(["shard", str(dst), "--range", "0:99", "--quiet", "--workers", "1"]) == 0
        assert main(["commit", str(dst), "--quiet"]) == 0
        assert len(_samples(dst)) == count
