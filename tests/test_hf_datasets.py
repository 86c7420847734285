"""Hugging Face datasets on disk: Parquet files written by the real `datasets` library (one file,
and a split stored as many files) pack with their features: Image bytes as stored, ClassLabel
names, text, lists of floats; bad cells are named by file, row and column, never dumped."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import fastloader
from fastloader.errors import PackError
from fastloader.format.open import open_dataset
from fastloader.pack.cli.main import main

datasets = pytest.importorskip("datasets", reason="datasets is a test dependency")
pa = pytest.importorskip("pyarrow", reason="pyarrow is a test dependency")
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is a test dependency")

N = 12
NAMES = ["cat", "dog", "owl"]


def pixels(k: int) -> np.ndarray:
    return np.random.default_rng(k).integers(0, 256, (12, 16, 3), np.uint8)


def png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def vector(k: int) -> list[float]:
    return [k, k / 2, -k][: 1 + k % 3]


def hf_dataset() -> datasets.Dataset:
    """Image + ClassLabel + text + list-of-float rows, as datasets stores them."""
    features = datasets.Features({
        "image": datasets.Image(), "label": datasets.ClassLabel(names=NAMES),
        "text": datasets.Value("string"), "vec": datasets.List(datasets.Value("float32"))})
    return datasets.Dataset.from_dict({
        "image": [{"bytes": png(pixels(k)), "path": f"img{k}.png"} for k in range(N)],
        "label": [k % 3 for k in range(N)], "text": [f"caption {k} é" for k in range(N)],
        "vec": [vector(k) for k in range(N)]}, features=features)


def check_packed(dst: Path, stored: list[bytes]) -> None:
    """dst holds the dataset's rows in order: its images' stored bytes (not re-encoded) and
    pixels, labels with their names, texts and arrays."""
    with open_dataset(dst) as ds:
        assert len(ds) == N and ds.classes == NAMES
        assert ds.fields["label"].classes == tuple(NAMES)
        assert ds.fields["vec"].kind == "ndarray" and ds.fields["vec"].dtype == "float32"
        for k in range(N):
            sample = ds.sample(k)
            assert sample["image"] == stored[k]
            assert int(sample["label"]) == k % 3 and sample["text"] == f"caption {k} é"
            assert np.array_equal(sample["vec"], np.asarray(vector(k), np.float32))
    loader = fastloader.FastLoader(dst, batch_size=N, fields=("image", "label", "text", "vec"),
                                   device="cpu", num_threads=1)
    with loader:
        images, labels, texts, vecs = next(iter(loader))
    assert all(np.array_equal(images[k].permute(1, 2, 0).numpy(), pixels(k)) for k in range(N))
    assert labels.tolist() == [k % 3 for k in range(N)]
    assert texts == [f"caption {k} é" for k in range(N)]
    assert all(np.array_equal(vecs[k].numpy(), np.float32(vector(k))) for k in range(N))


def stored_bytes() -> list[bytes]:
    return [png(pixels(k)) for k in range(N)]


def test_a_parquet_file_written_by_datasets_packs_with_its_features(tmp_path: Path) -> None:
    hf_dataset().to_parquet(tmp_path / "train.parquet")
    fastloader.pack(tmp_path / "train.parquet", tmp_path / "o.lmdb", workers=2)
    check_packed(tmp_path / "o.lmdb", stored_bytes())
    # --label on the ClassLabel column keeps its names (not its ids' text)
    fastloader.pack(tmp_path / "train.parquet", tmp_path / "l.lmdb", workers=1, label="label")
    with open_dataset(tmp_path / "l.lmdb") as ds:
        assert ds.classes == NAMES and ds.labels.tolist() == [k % 3 for k in range(N)]


def shards(folder: Path, count: int = 3, split: str = "train") -> str:
    """The dataset written as count files, the Hub's way; their brace pattern."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(count):
        hf_dataset().shard(count, k).to_parquet(folder / f"{split}-{k:05d}-of-{count:05d}.parquet")
    return str(folder / f"{split}-{{00000..{count - 1:05d}}}-of-{count:05d}.parquet")


def test_a_split_of_many_files_is_one_source_in_order(tmp_path: Path) -> None:
    pattern = shards(tmp_path / "data")
    fastloader.pack(pattern, tmp_path / "p.lmdb", workers=2)
    check_packed(tmp_path / "p.lmdb", stored_bytes())
    assert main([str(tmp_path / "data"), str(tmp_path / "f.lmdb"), "--quiet"]) == 0
    check_packed(tmp_path / "f.lmdb", stored_bytes())


def test_a_folder_of_several_splits_or_a_missing_shard_is_refused(tmp_path: Path) -> None:
    shards(tmp_path / "data")
    shards(tmp_path / "data", 2, "test")
    with pytest.raises(PackError, match=r"holds the \.parquet files of 2 splits \(test, train\)"
                       r".*'.*data/train-\{00000\.\.00002\}-of-00003\.parquet'"):
        fastloader.pack(tmp_path / "data", tmp_path / "o.lmdb")
    (tmp_path / "data" / "test-00000-of-00002.parquet").unlink()
    (tmp_path / "data" / "test-00001-of-00002.parquet").unlink()
    (tmp_path / "data" / "train-00001-of-00003.parquet").unlink()
    with pytest.raises(PackError, match=r"train-00001-of-00003\.parquet is not there"):
        fastloader.pack(tmp_path / "data", tmp_path / "o.lmdb")
    with pytest.raises(PackError, match=r"train-00001-of-00003\.parquet: no such table file"):
        fastloader.pack(str(tmp_path / "data/train-{00000..00002}-of-00003.parquet"),
                        tmp_path / "o.lmdb")


def struct_table(path: Path, cells: list[Any]) -> None:
    """A Parquet file of {bytes, path} image structs (datasets' Image storage) and ints."""
    kind = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    pq.write_table(pa.table({"image": pa.array(cells, kind),
                             "n": list(range(len(cells)))}), path)


def test_bad_image_cells_are_named_by_file_row_and_column(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "1.png").write_bytes(png(pixels(1)))
    jpeg_like = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8
    struct_table(tmp_path / "t.parquet", [
        {"bytes": png(pixels(0)), "path": "ignored.png"},  # bytes win over the path
        {"bytes": None, "path": "img/1.png"},  # no bytes: the path, under the table's folder
        {"bytes": None, "path": None}, None, {"bytes": jpeg_like, "path": None}])
    with pytest.raises(PackError) as caught:
        fastloader.pack(tmp_path / "t.parquet", tmp_path / "o.lmdb", workers=1)
    message = str(caught.value)
    assert f"{tmp_path / 't.parquet'} line 3: field 'image'" in message
    # pack() speaks its arguments' words (packdata its flags: pack/cli/words)
    assert "column 'image' has neither bytes nor a path" in message and "skip_bad=True" in message
    assert "\\x" not in message and "b'" not in message  # no bytes dumped
    manifest = fastloader.pack(tmp_path / "t.parquet", tmp_path / "s.lmdb", workers=2,
                               skip_bad=True)
    reasons = [s["reason"] for s in manifest.stats["skipped_samples"]]
    assert len(reasons) == 3 and all("\\x" not in r for r in reasons)
    assert "line 4" in reasons[1] and "is empty (no image)" in reasons[1]
    assert "line 5" in reasons[2] and "not an image Pillow recognises" in reasons[2]
    with open_dataset(tmp_path / "s.lmdb") as ds:
        assert [ds.sample(k)["image"] for k in range(2)] == [png(pixels(0)), png(pixels(1))]
        assert [int(ds.sample(k)["n"]) for k in range(2)] == [0, 1]


def test_a_field_declared_over_the_image_column_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hf_dataset().to_parquet(tmp_path / "t.parquet")
    # each interface in its own words: pack() its arguments, packdata its flags
    with pytest.raises(PackError, match=r"fields=\{'image': \.\.\.\} declares the image column "
                       r"'image' another kind.*drop it from fields=, or pick another image "
                       r"column with image='COL'") as caught:
        fastloader.pack(tmp_path / "t.parquet", tmp_path / "o.lmdb", fields={"image": "bytes"})
    assert "--" not in str(caught.value)
    assert main([str(tmp_path / "t.parquet"), str(tmp_path / "o.lmdb"),
                 "--field", "image:bytes"]) != 0
    said = capsys.readouterr().err
    assert "--field image:... declares the image column" in said
    assert "drop it from --field, or pick another image column with --image COL" in said
    assert "fields=" not in said and "image=" not in said
    fastloader.pack(tmp_path / "t.parquet", tmp_path / "d.lmdb", workers=1,
                    fields={"vec": "json", "label": "int"})  # others are overridden
    with open_dataset(tmp_path / "d.lmdb") as ds:
        assert ds.sample(2)["vec"] == vector(2)
        assert ds.fields["label"].classes is None


def test_features_fastloader_cannot_hold_are_refused_naming_the_way_out(tmp_path: Path) -> None:
    dataset = hf_dataset().add_column("fine", [k % 4 for k in range(N)],
                                      feature=datasets.ClassLabel(names=list("abcd")))
    dataset.to_parquet(tmp_path / "two.parquet")
    with pytest.raises(PackError, match=r"columns 'label', 'fine' all have class names.*"
                       r"fields=\{'fine': 'int'\}") as caught:
        fastloader.pack(tmp_path / "two.parquet", tmp_path / "o.lmdb")
    assert "--field" not in str(caught.value)
    fastloader.pack(tmp_path / "two.parquet", tmp_path / "o.lmdb", workers=1,
                    fields={"fine": "int"})
    with open_dataset(tmp_path / "o.lmdb") as ds:
        assert ds.classes == NAMES and int(ds.sample(5)["fine"]) == 1
    stamped = hf_dataset().add_column("when", [np.datetime64(k, "s") for k in range(N)],
                                      feature=datasets.Value("timestamp[s]"))
    stamped.to_parquet(tmp_path / "ts.parquet")
    with pytest.raises(PackError, match=r"column 'when' is a Value\('timestamp\[s\]'\) feature"
                       r".*remove_columns\('when'\)"):
        fastloader.pack(tmp_path / "ts.parquet", tmp_path / "t.lmdb")


def test_pack_a_datasets_dataset_reads_its_stored_image_bytes(tmp_path: Path) -> None:
    dataset = hf_dataset()
    fastloader.pack(dataset, tmp_path / "o.lmdb", workers=2)
    check_packed(tmp_path / "o.lmdb", stored_bytes())
    with open_dataset(tmp_path / "o.lmdb") as ds:  # the images' own paths are kept
        assert ds.path(3) == "img3.png"
    # a streamed dataset too, in its order
    fastloader.pack(dataset.to_iterable_dataset(num_shards=2), tmp_path / "s.lmdb", workers=2)
    check_packed(tmp_path / "s.lmdb", stored_bytes())
    with pytest.raises(PackError, match=r"packs one split, and this DatasetDict holds 'train', "
                       r"'test': pass one, e.g. pack\(dataset\['train'\], dst\)"):
        fastloader.pack(datasets.DatasetDict(train=dataset, test=dataset), tmp_path / "d.lmdb")
    with pytest.raises(PackError, match="class_encode_column"):
        fastloader.pack(dataset, tmp_path / "d.lmdb", label="text")


def test_pack_a_dataset_with_fields_overridden_and_a_chosen_image_column(
        tmp_path: Path) -> None:
    dataset = hf_dataset().add_column(
        "thumb", [{"bytes": png(pixels(k)[:4, :4]), "path": None} for k in range(N)],
        feature=datasets.Image())
    fastloader.pack(dataset, tmp_path / "o.lmdb", workers=1, image="thumb",
                    fields={"vec": "json"})
    with open_dataset(tmp_path / "o.lmdb") as ds:
        assert next(iter(ds.fields)) == "thumb" and ds.fields["image"].kind == "image"
        assert ds.sample(4)["thumb"] == png(pixels(4)[:4, :4])
        assert ds.sample(4)["image"] == png(pixels(4)) and ds.sample(4)["vec"] == vector(4)
    with pytest.raises(PackError, match=r"image='text' is not one of its Image columns"):
        fastloader.pack(dataset, tmp_path / "b.lmdb", image="text")
    with pytest.raises(PackError, match=r"fields names \['nope'\], not columns"):
        fastloader.pack(dataset, tmp_path / "b.lmdb", fields={"nope": "int"})


def test_pil_images_are_encoded_once_losslessly_unless_told(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    samples = [{"image": Image.fromarray(pixels(k)), "label": k % 3} for k in range(6)]
    fields = {"image": "image", "label": ("int", NAMES)}
    with caplog.at_level("INFO", logger="fastloader"):
        fastloader.pack(samples, tmp_path / "p.lmdb", fields=fields, workers=2)
    assert "PIL images are encoded once, as PNG (lossless" in caplog.text
    with open_dataset(tmp_path / "p.lmdb") as ds:
        for k in range(6):
            data = ds.sample(k)["image"]
            assert data.startswith(b"\x89PNG")
            assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), pixels(k))
    # a decoded datasets row (PIL images) is a Python sample too
    decoded = [dict(hf_dataset()[k]) for k in range(3)]
    fastloader.pack(iter(decoded), tmp_path / "r.lmdb", workers=1, pil_format="jpeg",
                    quality=95, fields={"image": "image", "label": "int", "text": "text",
                                        "vec": ("ndarray", "float32", (-1,))})
    with open_dataset(tmp_path / "r.lmdb") as ds:
        data = ds.sample(2)["image"]
        assert data.startswith(b"\xff\xd8") and ds.sample(2)["text"] == "caption 2 é"
        error = np.abs(np.asarray(Image.open(io.BytesIO(data)), np.int16) - pixels(2))
        assert 0 < error.mean() < 60  # JPEG: close, not equal
    with pytest.raises(PackError, match=r"pil_format='gif': choose one of png, jpeg"):
        fastloader.pack(samples, tmp_path / "g.lmdb", fields=fields, pil_format="gif")
    hf_dataset().to_parquet(tmp_path / "t.parquet")
    with pytest.raises(PackError, match=r"pil_format='jpeg' applies to PIL images in Python"):
        fastloader.pack(tmp_path / "t.parquet", tmp_path / "g.lmdb", pil_format="jpeg")


def test_binary_image_cells_and_cells_shown_without_their_bytes(tmp_path: Path) -> None:
    """A plain binary column of image bytes (no datasets metadata) is read as images; a bad
    cell in the parent (a JSONL struct where a path belongs) is shown by what it is."""
    pq.write_table(pa.table({"image": pa.array([png(pixels(k)) for k in range(3)], pa.binary()),
                             "caption": [f"c{k}" for k in range(3)]}), tmp_path / "b.parquet")
    fastloader.pack(tmp_path / "b.parquet", tmp_path / "b.lmdb", workers=1)
    with open_dataset(tmp_path / "b.lmdb") as ds:
        assert [ds.sample(k)["image"] for k in range(3)] == [png(pixels(k)) for k in range(3)]
        assert ds.sample(2)["caption"] == "c2"
    (tmp_path / "t.jsonl").write_text('{"path": {"bytes": "\\u00ff\\u00d8' + "x" * 80 + '"}}\n')
    with pytest.raises(PackError, match=r"t\.jsonl line 1: field 'image' \(column 'path'\) "
                       r"\(image\) \(a struct of bytes\): has no image path"):
        fastloader.pack(tmp_path / "t.jsonl", tmp_path / "j.lmdb", workers=1)
