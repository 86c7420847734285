"""The COCO detection importer on generated instances files: boxes from XYWH, contiguous
labels, crowd, empty images, and the bad inputs it names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fastloader
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from imagegen import encode

CATEGORIES = [{"id": 7, "name": "zebra"}, {"id": 1, "name": "person"},
              {"id": 3, "name": "car"}]  # unordered on purpose: labels follow ascending ids


def _coco(root: Path, **change: Any) -> Path:
    """images/ with 4 photos (40x60) and root/instances.json; image 4 has no annotations."""
    (root / "images").mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    images = []
    for i in range(1, 5):
        name = f"{i:03d}.png"
        (root / "images" / name).write_bytes(
            encode(rng.integers(0, 256, (40, 60, 3), np.uint8), "PNG"))
        images.append({"id": 100 + i, "file_name": name, "width": 60, "height": 40})
    annotations = [
        {"id": 1, "image_id": 101, "category_id": 7, "bbox": [1, 2, 10, 20], "iscrowd": 0},
        {"id": 2, "image_id": 101, "category_id": 1, "bbox": [5.5, 6, 4, 3], "iscrowd": 1},
        {"id": 3, "image_id": 102, "category_id": 3, "bbox": [0, 0, 60, 40], "iscrowd": 0},
        {"id": 4, "image_id": 103, "category_id": 1, "bbox": [50, 30, 20, 20], "iscrowd": 0},
    ]
    data = {"images": images, "annotations": annotations, "categories": CATEGORIES}
    for key, value in change.items():
        data[key] = value(data[key]) if callable(value) else value
    path = root / "instances.json"
    path.write_text(json.dumps(data))
    return path


def test_coco_import_boxes_labels_crowd_and_empty_images(tmp_path: Path) -> None:
    src = _coco(tmp_path)
    manifest = fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images", workers=1)
    assert manifest.num_samples == 4
    assert manifest.options["source"]["categories"] == [
        {"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 7, "name": "zebra"}]
    with fastloader.open_dataset(tmp_path / "d.lmdb") as ds:
        assert ds.fields["boxes"].per_box == ("box_labels", "iscrowd")
        by_id = {int(ds.sample(i)["image_id"]): ds.sample(i) for i in range(len(ds))}
    np.testing.assert_allclose(by_id[101]["boxes"], [[1, 2, 11, 22], [5.5, 6, 9.5, 9]])
    assert by_id[101]["box_labels"].tolist() == [2, 0]  # zebra (7) -> 2, person (1) -> 0
    assert by_id[101]["iscrowd"].tolist() == [0, 1]
    assert by_id[102]["box_labels"].tolist() == [1]
    np.testing.assert_allclose(by_id[103]["boxes"], [[50, 30, 70, 50]])  # kept, clipped on load
    assert by_id[104]["boxes"].shape == (0, 4) and by_id[104]["box_labels"].shape == (0,)


def test_skip_empty_and_the_cli(tmp_path: Path) -> None:
    src = _coco(tmp_path)
    assert main([str(src), str(tmp_path / "d.lmdb"), "--images", str(tmp_path / "images"),
                 "--skip-empty", "--workers", "1"]) == 0
    with fastloader.open_dataset(tmp_path / "d.lmdb") as ds:
        assert sorted(int(ds.sample(i)["image_id"]) for i in range(len(ds))) == [101, 102, 103]
    with fastloader.FastLoader(tmp_path / "d.lmdb", batch_size=3, device="cpu",
                               transforms=[fastloader.Resize((20, 30))],
                               fields=["boxes", "box_labels", "image_id"]) as loader:
        boxes, labels, ids = next(iter(loader))
    assert labels[ids.tolist().index(103)].tolist() == [0]
    row = ids.tolist().index(103)
    np.testing.assert_allclose(boxes[row].numpy(), [[25, 15, 30, 20]])  # half scale, clipped


def _unknown_category(anns: list) -> list:
    return [*anns, {"id": 9, "image_id": 102, "category_id": 5, "bbox": [1, 1, 2, 2]}]


def _bad_box(anns: list) -> list:
    return [*anns, {"id": 11, "image_id": 102, "category_id": 3, "bbox": [1, 1, 0, 2]}]


def _unknown_image(anns: list) -> list:
    return [*anns, {"id": 12, "image_id": 999, "category_id": 3, "bbox": [1, 1, 2, 2]}]


@pytest.mark.parametrize("change, message", [
    ({"annotations": _unknown_category}, r"annotation 9 has category_id 5, which is not in"),
    ({"annotations": _unknown_image}, "annotation 12 refers to an image id not in"),
    ({"categories": [{"name": "x"}]}, "each needs an int 'id'"),
    ({"images": "nope"}, "not a COCO detection file"),
])
def test_bad_coco_files_are_named(tmp_path: Path, change: dict, message: str) -> None:
    src = _coco(tmp_path, **change)
    with pytest.raises(PackError, match=message) as caught:
        fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images", workers=1)
    assert str(src) in str(caught.value)
    assert not (tmp_path / "d.lmdb").exists()


@pytest.mark.parametrize("how, message", [
    ("bad box", r"image id 102 .*annotation 11 has bbox \[1, 1, 0, 2\] with no area"),
    ("missing image", r"image id 103 .*003.png is missing; pass root=DIR"),
])
def test_a_bad_image_stops_the_pack_or_is_skipped(tmp_path: Path, how: str,
                                                  message: str) -> None:
    src = _coco(tmp_path, annotations=_bad_box) if how == "bad box" else _coco(tmp_path)
    if how == "missing image":
        (tmp_path / "images" / "003.png").unlink()
    with pytest.raises(PackError, match=message):
        fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images", workers=1)
    manifest = fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images", workers=1,
                               skip_bad=True)
    assert manifest.num_samples == 3 and manifest.stats["skipped"] == 1


def test_a_missing_image_names_each_interfaces_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _coco(tmp_path)
    (tmp_path / "images" / "003.png").unlink()
    with pytest.raises(PackError, match="pass root=DIR") as caught:
        fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images", workers=1)
    assert "--" not in str(caught.value)
    assert main([str(src), str(tmp_path / "d.lmdb"), "--images", str(tmp_path / "images"),
                 "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "003.png is missing; pass --root DIR" in err and "root=" not in err, err


def test_skip_empty_is_for_coco_only(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="COCO files only"):
        fastloader.pack([{"image": b""}], tmp_path / "d.lmdb", fields={"image": "image"},
                        skip_empty=True)
