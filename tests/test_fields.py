"""Format v2 fields through the Python API: pack(samples, fields=...), fields, sample(i), the
checks at open on every column, verify/info, and FastLoader's tuples, dicts and multi-hot."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fastloader
from fastloader import FastLoader, open_dataset
from fastloader.errors import DatasetError, InvalidArgumentError, PackError
from fastloader.format.manifest import read_manifest
from fastloader.pack.maintain.info import dataset_info, format_info
from fastloader.pack.maintain.verify import verify
from helpers import as_format_v1, packed_tree
from imagegen import encode, photo_like

FIELDS: dict[str, Any] = {
    "image": "image", "label": "int", "score": "float",
    "emb": ("ndarray", "float32", (8,)), "tokens": ("ndarray", "int32", (-1,)),
    "grid": ("ndarray", "uint8", (-1, 3)), "caption": "text", "raw": "bytes", "meta": "json",
    "mask": "image",
}


def make_samples(n: int = 12) -> list[dict[str, Any]]:
    """Samples with every kind, including empty text and bytes and zero-length arrays."""
    out = []
    for k in range(n):
        out.append({
            "image": encode(photo_like(16 + k, 24, k)), "label": k % 3, "score": k / 7 - 0.5,
            "emb": np.linspace(0, 1, 8, dtype=np.float32) * k,
            "tokens": np.arange(k % 4, dtype=np.int32) * 3,
            "grid": np.full((k % 3, 3), k, np.uint8),
            "caption": "" if k == 2 else f"caption {k} café ✓", "raw": bytes(range(k % 5)),
            "meta": {"k": k, "tags": ["a"] * (k % 2), "x": None, "f": 0.25},
            "mask": encode(photo_like(8, 8, 100 + k), "PNG"),
        })
    return out


def check_equal(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        if isinstance(value, np.ndarray):
            assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
            np.testing.assert_array_equal(got[name], value)
        else:
            assert got[name] == value and type(got[name]) is not None, name


@pytest.fixture(scope="module")
def v2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    samples = make_samples()
    dst = tmp_path_factory.mktemp("v2") / "wide.lmdb"
    fastloader.pack(samples, dst, fields=FIELDS, workers=2)
    return dst, samples


def test_every_value_reads_back_exactly(v2: Any) -> None:
    dst, samples = v2
    with open_dataset(dst) as ds:
        assert list(ds.fields) == list(FIELDS)
        assert ds.fields["emb"].dtype == "float32" and ds.fields["emb"].shape == (8,)
        assert ds.fields["grid"].shape == (-1, 3) and ds.fields["caption"].kind == "text"
        for i, sample in enumerate(samples):
            got = ds.sample(i)
            assert isinstance(got["label"], np.integer) and isinstance(got["score"], np.floating)
            assert isinstance(got["image"], bytes) and isinstance(got["caption"], str)
            check_equal(got, sample)
        assert ds.labels.tolist() == [s["label"] for s in samples]  # the label field
    assert read_manifest(dst).version == 2


@pytest.mark.parametrize("how", ["generator", "mapstyle"])
def test_iterables_and_map_style_datasets_pack_in_order(tmp_path: Path, how: str) -> None:
    samples = make_samples(6)

    class MapStyle:
        def __len__(self) -> int:
            return len(samples)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return samples[i]

    source = (s for s in samples) if how == "generator" else MapStyle()
    fastloader.pack(source, tmp_path / "d.h5", fields=FIELDS, workers=2)
    with open_dataset(tmp_path / "d.h5") as ds:
        for i, sample in enumerate(samples):
            check_equal(ds.sample(i), sample)


def test_v1_imagefolder_datasets_still_load(tmp_path: Path) -> None:
    dst = as_format_v1(packed_tree(tmp_path, classes=2, per_class=3))  # as trees once packed
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["version"] == 1 and "sample_fields" not in manifest
    with open_dataset(dst) as ds:
        assert list(ds.fields) == ["image", "label"]
        assert ds.fields["label"].classes == ("class_0", "class_1")
        sample = ds.sample(4)
        assert sample["image"] == bytes(ds.record(4)) and sample["label"] == 1
    with FastLoader(dst, batch_size=6, device="cpu", num_threads=1,
                    transforms=[fastloader.Resize((16, 16))]) as loader:
        images, labels = next(iter(loader))  # (images, labels), as v1 always gave
        assert images.shape[0] == 6 and labels.tolist() == [0, 0, 0, 1, 1, 1]


def test_loader_yields_fields_in_order_and_dicts_without_fields(v2: Any) -> None:
    dst, samples = v2
    options = {"batch_size": 4, "device": "cpu", "num_threads": 1, "transforms":
               [fastloader.Resize((16, 16))]}
    with FastLoader(dst, fields=["caption", "emb", "image", "score", "tokens", "meta"],
                    **options) as loader:
        caption, emb, images, score, tokens, meta = next(iter(loader))
    assert caption == [s["caption"] for s in samples[:4]]
    assert emb.shape == (4, 8) and emb.dtype == torch.float32
    np.testing.assert_array_equal(emb.numpy(), np.stack([s["emb"] for s in samples[:4]]))
    assert images.shape == (4, 3, 16, 16) and score.dtype == torch.float64
    assert [t.tolist() for t in tokens] == [s["tokens"].tolist() for s in samples[:4]]
    assert meta == [s["meta"] for s in samples[:4]]
    with FastLoader(dst, **options) as loader:
        batch = next(iter(loader))
    assert list(batch) == list(FIELDS)
    assert batch["label"].tolist() == [0, 1, 2, 0] and batch["raw"][3] == bytes(range(3))
    assert batch["mask"].shape == (4, 3, 16, 16) and batch["mask"].dtype == torch.uint8
    from PIL import Image

    for k in range(4):  # a further image: decoded with the same transforms (Resize here)
        want = np.asarray(Image.open(io.BytesIO(samples[k]["mask"])).convert("RGB").resize(
            (16, 16), Image.Resampling.BILINEAR))
        got = batch["mask"][k].permute(1, 2, 0).numpy()
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 2
    with FastLoader(dst, decode_images=False, fields=["mask"], **options) as loader:
        (masks,) = next(iter(loader))
    assert masks == [s["mask"] for s in samples[:4]]
    assert [g.shape for g in batch["grid"]] == [(0, 3), (1, 3), (2, 3), (0, 3)]


def test_image_and_label_dataset_yields_images_and_labels(tmp_path: Path) -> None:
    samples = [{"jpg": encode(photo_like(12, 12, k)), "cls": k % 2} for k in range(4)]
    fastloader.pack(samples, tmp_path / "c.lmdb", fields={"jpg": "image", "cls": "int"},
                    workers=1)
    with FastLoader(tmp_path / "c.lmdb", batch_size=4, device="cpu", num_threads=1) as loader:
        images, labels = next(iter(loader))
    assert images.shape == (4, 3, 12, 12) and labels.tolist() == [0, 1, 0, 1]
    with open_dataset(tmp_path / "c.lmdb") as ds:
        assert ds.classes == ["0", "1"]


def test_multi_hot_turns_a_label_list_into_a_matrix(tmp_path: Path) -> None:
    samples = [{"image": encode(photo_like(10, 10, k)), "tags": np.array(t, np.int64)}
               for k, t in enumerate([[0, 3], [], [1], [2, 3, 4]])]
    fields = {"image": "image", "tags": ("ndarray", "int64", (-1,))}
    fastloader.pack(samples, tmp_path / "m.lmdb", fields=fields, workers=1)
    options = {"batch_size": 4, "device": "cpu", "num_threads": 1, "fields": ["tags"]}
    with FastLoader(tmp_path / "m.lmdb", multi_hot=5, **options) as loader:
        (hot,) = next(iter(loader))
    assert hot.tolist() == [[1, 0, 0, 1, 0], [0, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 1, 1]]
    with FastLoader(tmp_path / "m.lmdb", multi_hot=3, **options) as loader, pytest.raises(
            InvalidArgumentError, match=r"a sample \(row 0 of the batch\) lists class 3"):
        next(iter(loader))
    with pytest.raises(InvalidArgumentError, match="has no field 'nope'"):
        FastLoader(tmp_path / "m.lmdb", batch_size=2, device="cpu", fields=["nope"])


def test_info_and_verify_cover_every_field(v2: Any) -> None:
    dst, _ = v2
    info = dataset_info(dst)
    assert info["fields"]["emb"] == "ndarray float32 (8,)" and info["fields"]["meta"] == "json"
    assert "caption (text)" in format_info(info)
    report = verify(dst, decode=True)
    assert report.ok, report.problems
    assert report.values_checked == 12 * 3  # caption, meta, mask


def _rewrite_array(dst: Path, name: str, array: np.ndarray) -> None:
    """Replace an index array and make manifest.json agree (sha256, shape): only the range
    checks at open stand between it and the reader."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    (dst / "index" / f"{name}.npy").write_bytes(buffer.getvalue())
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["fields"][name].update(sha256=hashlib.sha256(buffer.getvalue()).hexdigest(),
                                    shape=list(array.shape), dtype=str(array.dtype))
    (dst / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("name", "damage", "message"), [
    ("field.caption.offsets", lambda a: a + 1, "offsets do not slice its values"),
    ("field.caption.offsets", lambda a: a[::-1].copy(), "offsets do not slice"),
    ("field.tokens.values", lambda a: a[:-1].copy(), "offsets do not slice"),
    ("field.grid.shapes", lambda a: a * 2, "per-sample shape disagrees"),
    ("field.emb", lambda a: a[:-1].copy(), "expected float32"),
    ("field.label", lambda a: a.astype(np.int32), "expected int64"),
])
def test_damaged_columns_fail_at_open(v2: Any, tmp_path: Path, name: str, damage: Any,
                                      message: str) -> None:
    import shutil

    copy = tmp_path / "copy.lmdb"
    shutil.copytree(v2[0], copy)
    array = np.load(copy / "index" / f"{name}.npy")
    _rewrite_array(copy, name, damage(array))
    with pytest.raises(DatasetError, match=message):
        open_dataset(copy)


def test_a_label_outside_its_classes_fails_at_open(tmp_path: Path) -> None:
    samples = [{"image": encode(photo_like(10, 10, k)), "label": "ab"[k % 2]} for k in range(4)]
    dst = tmp_path / "named.lmdb"
    fastloader.pack(samples, dst, fields={"image": "image", "label": ("int", ["a", "b"])},
                    workers=1)
    labels = np.load(dst / "index" / "field.label.npy")
    _rewrite_array(dst, "field.label", np.where(labels == 1, 2, labels))
    with pytest.raises(DatasetError, match=r"field 'label' \(int \(2 classes\)\): a label "
                       r"outside 0\.\.1"):
        open_dataset(dst)


def test_an_edited_column_fails_its_sha256(v2: Any, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy.lmdb"
    shutil.copytree(v2[0], copy)
    path = copy / "index" / "field.caption.values.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="sha256"):
        open_dataset(copy)
    assert not verify(copy).ok


def test_invalid_utf8_text_is_a_corrupt_record_and_verify_names_it(v2: Any,
                                                                    tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy.lmdb"
    shutil.copytree(v2[0], copy)
    values = np.load(copy / "index" / "field.caption.values.npy")
    values[:2] = 0xFF  # sample 0's caption starts with invalid UTF-8
    _rewrite_array(copy, "field.caption.values", values)
    with open_dataset(copy) as ds, pytest.raises(DatasetError, match="not valid UTF-8"):
        ds.sample(0)
    report = verify(copy)
    assert any("record 0: field 'caption'" in p for p in report.problems)


@pytest.mark.parametrize(("sample", "message"), [
    ({"label": 1}, "sample 3: has no field 'image', which other samples have"),
    ({"label": 2.5}, r"sample 3: field 'label' \(int\): expected an int, got float 2.5"),
    ({"score": "x"}, r"field 'score' \(float\): expected a float, got str"),
    ({"emb": np.zeros(7, np.float32)}, r"field 'emb' .*shape \(7,\) does not fit"),
    ({"emb": ["a"] * 8}, "dtype <U1 cannot become"),
    ({"caption": 5}, r"field 'caption' \(text\): expected text"),
    ({"meta": {"x": float("nan")}}, "not JSON-serializable"),
    ({"meta": object()}, "not JSON-serializable"),
    ({"mask": b"not an image"}, r"field 'mask' \(image\): not an image"),
    ({"image": "/no/such/file.jpg"}, "cannot read '/no/such/file.jpg'"),
    ({"extra": 1}, "has field 'extra', which the dataset does not declare"),
])
def test_a_bad_sample_is_named_and_no_dataset_is_left(tmp_path: Path,
                                                     sample: dict[str, Any],
                                                     message: str) -> None:
    samples = make_samples(5)
    if "image" in sample and sample["image"] is None:
        pass
    bad = dict(samples[3])
    if list(sample) == ["label"] and sample["label"] == 1:
        del bad["image"]
    bad.update(sample)
    samples[3] = bad
    with pytest.raises(PackError, match=message):
        fastloader.pack(samples, tmp_path / "x.lmdb", fields=FIELDS, workers=1)
    # no dataset, and no staging: its one shard never finished, so --resume has nothing to
    # reuse (tests/test_pack_rules.py: where a shard finished, it is kept)
    assert list(tmp_path.iterdir()) == []
    manifest = fastloader.pack(samples, tmp_path / "x.lmdb", fields=FIELDS, workers=1,
                               skip_bad=True)
    assert manifest.num_samples == 4 and manifest.stats["skipped"] == 1
    assert "sample 3" in manifest.stats["skipped_samples"][0]["reason"]
    assert json.loads((tmp_path / "x.lmdb" / "skipped.json").read_text())[0]["sample"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"label": "int"}, "no field of kind 'image'"),
    ({"image": "picture"}, "has kind"),
    ({"image": "image", "e": ("ndarray", "object", (2,))}, "not a numeric dtype"),
    ({"image": "image", "e": ("ndarray", "float32", (2, -2))}, "shape"),
    ({"image": "image", "../x": "int"}, "field name"),
    ({}, "give a dict"),
])
def test_bad_field_declarations_are_refused(tmp_path: Path, fields: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        fastloader.pack(make_samples(2), tmp_path / "x.lmdb", fields=fields, workers=1)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["sample_fields"].__setitem__(2, {"name": "score", "kind": "pickle"}),
     "has kind"),
    (lambda m: m["fields"].pop("field.caption.values"), "lists no index field "
     "'field.caption.values'"),
    (lambda m: m.pop("sample_fields"), "sample_fields is not a list"),
    (lambda m: m["sample_fields"].append({"name": "image", "kind": "text"}), "appears twice"),
    (lambda m: m.update(version=1), "a version 1 manifest has sample_fields"),
])
def test_a_hostile_manifest_of_fields_is_a_dataset_error(v2: Any, tmp_path: Path, edit: Any,
                                                        message: str) -> None:
    import shutil

    copy = tmp_path / "copy.lmdb"
    shutil.copytree(v2[0], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match=message):
        open_dataset(copy)


def test_padded_gives_values_and_lengths(v2: Any) -> None:
    dst, samples = v2
    with FastLoader(dst, batch_size=4, device="cpu", num_threads=1, padded=True,
                    transforms=[fastloader.Resize((8, 8))], fields=["tokens", "grid"]) as loader:
        (tokens, lengths), (grid, grid_lengths) = next(iter(loader))
    assert lengths.tolist() == [0, 1, 2, 3] and tokens.shape == (4, 3)
    assert tokens.dtype == torch.int32
    for row, sample in enumerate(samples[:4]):
        np.testing.assert_array_equal(tokens[row, : lengths[row]].numpy(), sample["tokens"])
        assert not tokens[row, lengths[row]:].any()
    assert grid.shape == (4, 2, 3) and grid_lengths.tolist() == [0, 1, 2, 0]
    np.testing.assert_array_equal(grid[2].numpy(), samples[2]["grid"])


def test_a_map_style_dataset_is_read_in_the_workers(tmp_path: Path) -> None:
    import os

    image = encode(photo_like(8, 8, 0))

    class Reads:
        def __len__(self) -> int:
            return 16

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"image": image, "pid": os.getpid()}  # which process ran __getitem__

    fastloader.pack(Reads(), tmp_path / "p.lmdb", fields={"image": "image", "pid": "int"},
                    workers=2)
    with open_dataset(tmp_path / "p.lmdb") as ds:
        pids = {int(ds.sample(i)["pid"]) for i in range(len(ds))}
    assert os.getpid() not in pids
