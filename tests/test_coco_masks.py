"""COCO `--masks`: polygons, RLE (a list of counts and COCO's compressed string), crowd regions
and empty images rasterized at pack time, read back through open_dataset equal to the masks
the test drew itself; entries whose size disagrees with their image, and bad segmentations,
named by file, image id and annotation id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fastloader
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from fastloader.pack.sources.rasterize import counts_to_string
from imagegen import encode

H, W = 40, 60
CATEGORIES = [{"id": 7, "name": "zebra"}, {"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
VALUE = {7: 3, 1: 1, 3: 2}  # mask value: contiguous id (ascending COCO ids) + 1


pytestmark = pytest.mark.native_neutral


def _runs(mask: np.ndarray) -> list[int]:
    """COCO run lengths, the obvious way: column-major, starting with a run of 0s."""
    runs, value, count = [], False, 0
    for pixel in mask.T.reshape(-1):
        if bool(pixel) != value:
            runs.append(count)
            value, count = bool(pixel), 0
        count += 1
    return [*runs, count]


def _rect(x0: int, y0: int, x1: int, y1: int) -> list[int]:
    """A rectangle polygon on whole pixels: it covers exactly [y0:y1, x0:x1]."""
    return [x0, y0, x1, y0, x1, y1, x0, y1]


def _scene() -> tuple[list[dict[str, Any]], dict[int, np.ndarray]]:
    """Annotations (image ids 101..104) and the semantic mask each image must get."""
    blob = np.zeros((H, W), bool)
    blob[5:25, 30:50] = True
    blob[10:15, 35:40] = False  # a hole: RLE can say what one polygon cannot
    crowd = np.zeros((H, W), bool)
    crowd[20:40, 0:30] = True
    anns = [
        # 101: a two-part polygon (zebra) over a crowd RLE (person): the object wins
        {"id": 1, "image_id": 101, "category_id": 7, "bbox": [2, 2, 20, 20], "iscrowd": 0,
         "segmentation": [_rect(2, 2, 12, 12), _rect(10, 10, 22, 22)]},
        {"id": 2, "image_id": 101, "category_id": 1, "bbox": [0, 20, 30, 20], "iscrowd": 1,
         "segmentation": {"counts": counts_to_string(_runs(crowd)), "size": [H, W]}},
        # 102: an uncompressed RLE (car) and a small polygon (person) lying on it
        {"id": 3, "image_id": 102, "category_id": 3, "bbox": [30, 5, 20, 20], "iscrowd": 0,
         "segmentation": {"counts": _runs(blob), "size": [H, W]}},
        {"id": 4, "image_id": 102, "category_id": 1, "bbox": [42, 18, 4, 4], "iscrowd": 0,
         "segmentation": [_rect(42, 18, 46, 22)]},
        # 103: a compressed RLE (zebra) listed before a larger polygon (car) covering it
        {"id": 5, "image_id": 103, "category_id": 7, "bbox": [30, 5, 20, 20], "iscrowd": 0,
         "segmentation": {"counts": counts_to_string(_runs(blob)), "size": [H, W]}},
        {"id": 6, "image_id": 103, "category_id": 3, "bbox": [25, 0, 35, 40], "iscrowd": 0,
         "segmentation": [_rect(25, 0, 60, 40)]},
    ]  # 104: no annotations
    want = {k: np.zeros((H, W), np.uint8) for k in (101, 102, 103, 104)}
    want[101][crowd] = 255
    want[101][2:12, 2:12] = want[101][10:22, 10:22] = VALUE[7]
    want[102][blob] = VALUE[3]
    want[102][18:22, 42:46] = VALUE[1]
    want[103][:, 25:60] = VALUE[3]
    want[103][blob] = VALUE[7]  # smaller: painted after the larger car
    return anns, want


def _coco(root: Path, anns: list[dict[str, Any]] | None = None,
          entries: dict[int, dict[str, Any]] | None = None) -> Path:
    (root / "images").mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    images = []
    for image_id in (101, 102, 103, 104):
        name = f"{image_id}.png"
        (root / "images" / name).write_bytes(
            encode(rng.integers(0, 256, (H, W, 3), np.uint8), "PNG"))
        images.append({"id": image_id, "file_name": name, "width": W, "height": H}
                      | (entries or {}).get(image_id, {}))
    data = {"images": images, "annotations": _scene()[0] if anns is None else anns,
            "categories": CATEGORIES}
    path = root / "instances.json"
    path.write_text(json.dumps(data))
    return path


def _masks(dst: Path) -> dict[int, np.ndarray]:
    with fastloader.open_dataset(dst) as ds:
        assert ds.fields["mask"].kind == "mask"
        return {int(ds.sample(i)["image_id"]): ds.sample(i)["mask"] for i in range(len(ds))}


@pytest.mark.parametrize("workers", [1, 2])
def test_masks_round_trip_polygons_rle_crowd_and_empty(tmp_path: Path, workers: int) -> None:
    src = _coco(tmp_path)
    manifest = fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images",
                               masks=True, workers=workers)
    assert manifest.options["source"]["mask_values"]["crowd"] == 255
    got = _masks(tmp_path / "d.lmdb")
    want = _scene()[1]
    assert sorted(got) == sorted(want)
    for image_id, mask in got.items():
        assert mask.dtype == np.uint8 and mask.shape == (H, W)
        np.testing.assert_array_equal(mask, want[image_id], err_msg=f"image {image_id}")


def test_masks_from_the_cli_and_skip_empty(tmp_path: Path) -> None:
    src = _coco(tmp_path)
    assert main([str(src), str(tmp_path / "d.h5"), "--images", str(tmp_path / "images"),
                 "--masks", "--skip-empty", "--workers", "1"]) == 0
    got = _masks(tmp_path / "d.h5")
    assert sorted(got) == [101, 102, 103]
    np.testing.assert_array_equal(got[102], _scene()[1][102])


def test_without_masks_there_is_no_mask_field(tmp_path: Path) -> None:
    fastloader.pack(_coco(tmp_path), tmp_path / "d.lmdb", root=tmp_path / "images", workers=1)
    with fastloader.open_dataset(tmp_path / "d.lmdb") as ds:
        assert "mask" not in ds.fields


def _bad_rle_size(anns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    anns[2] = anns[2] | {"segmentation": {"counts": [H * W], "size": [W, H]}}
    return anns


def _no_segmentation(anns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    del anns[3]["segmentation"]
    return anns


def _bad_polygon(anns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    anns[3] = anns[3] | {"segmentation": [[1, 2, 3]]}
    return anns


@pytest.mark.parametrize("anns, entries, message", [
    (None, {102: {"height": 30}},
     r"image id 102 \(.*102.png\).* says height 30, width 60 but the image is 40 x 60"),
    (_bad_rle_size(_scene()[0]), None,
     r"image id 102 .*annotation 3: RLE size \[60, 40\] differs from the image's"),
    (_no_segmentation(_scene()[0]), None, r"image id 102 .*annotation 4 has no segmentation"),
    (_bad_polygon(_scene()[0]), None,
     r"image id 102 .*annotation 4: polygon \[1, 2, 3\] is not a flat list"),
])
def test_a_bad_mask_stops_the_pack_or_is_skipped(tmp_path: Path, anns: Any, entries: Any,
                                                 message: str) -> None:
    src = _coco(tmp_path, anns, entries)
    with pytest.raises(PackError, match=message) as caught:
        fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images", masks=True,
                        workers=1)
    assert str(src) in str(caught.value)
    assert not (tmp_path / "d.lmdb").exists()
    manifest = fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images", masks=True,
                               workers=2, skip_bad=True)
    assert manifest.num_samples == 3 and manifest.stats["skipped"] == 1
    skipped = manifest.stats["skipped_samples"][0]
    assert skipped["sample"].endswith("102.png") and "image id 102" in skipped["reason"]
    assert sorted(_masks(tmp_path / "d.lmdb")) == [101, 103, 104]


def test_masks_need_a_coco_file_and_few_enough_classes(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("path\nx.png\n")
    with pytest.raises(PackError, match="COCO files only"):
        fastloader.pack(tmp_path / "t.csv", tmp_path / "d.lmdb", masks=True)
    many = [{"id": k, "name": f"c{k}"} for k in range(1, 300)]
    src = _coco(tmp_path)
    data = json.loads(src.read_text()) | {"categories": many}
    src.write_text(json.dumps(data))
    with pytest.raises(PackError, match="299 categories do not fit a uint8 mask"):
        fastloader.pack(src, tmp_path / "d.lmdb", root=tmp_path / "images", masks=True)
