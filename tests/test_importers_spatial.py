"""Boxes and masks from tables (CSV, JSONL) and WebDataset file groups (a folder, a .tar):
read back through open_dataset equal to what was written; malformed JSON boxes, boxes with no
area, missing and mis-sized masks named by file, line or member (skip_bad packs the rest)."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import fastloader
from fastloader.errors import PackError
from imagegen import encode, photo_like

H, W = 24, 32


def _mask(k: int) -> np.ndarray:
    mask = np.zeros((H, W), np.uint8)
    mask[k:k + 8, 2 * k:2 * k + 10] = k + 1
    mask[20:, :5] = 255
    return mask


def _png(mask: np.ndarray) -> bytes:
    """An 8-bit grey PNG of a label image."""
    buffer = io.BytesIO()
    Image.fromarray(mask).save(buffer, format="PNG")
    return buffer.getvalue()


def _boxes(k: int) -> list[list[float]]:
    return [[1.5 + k, 2, 10, 12 + k], [0, 0, W + 5, H]][: k % 3]  # 0, 1 or 2 boxes


def _files(root: Path, n: int) -> None:
    """img/k.jpg and seg/k.png (an 8-bit grey label image) for k < n."""
    (root / "img").mkdir(parents=True, exist_ok=True)
    (root / "seg").mkdir(exist_ok=True)
    for k in range(n):
        (root / "img" / f"{k}.jpg").write_bytes(encode(photo_like(H, W, k)))
        (root / "seg" / f"{k}.png").write_bytes(_png(_mask(k)))


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"path": f"img/{k}.jpg", "boxes": _boxes(k),
             "box_labels": [k, k + 1][: k % 3], "iscrowd": [0, 1][: k % 3],
             "mask": f"seg/{k}.png"} for k in range(n)]


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows({k: json.dumps(v) if isinstance(v, list) and v else
                          ("" if isinstance(v, list) else v) for k, v in row.items()}
                         for row in rows)  # an empty list as an empty cell: no boxes
    return path


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _check(dst: Path, n: int, names: tuple[str, str] = ("boxes", "mask"),
           image: str = "image") -> None:
    boxes, mask = names
    with fastloader.open_dataset(dst) as ds:
        assert ds.fields[boxes].kind == "boxes" and ds.fields[mask].kind == "mask"
        assert ds.fields[boxes].per_box == ("box_labels", "iscrowd")
        assert image in ds.fields and len(ds) == n
        for i in range(n):
            sample = ds.sample(i)
            k = int(Path(ds.paths[i]).stem)  # img/k.jpg, or the group key k
            np.testing.assert_allclose(sample[boxes], np.reshape(_boxes(k), (-1, 4)))
            assert sample["box_labels"].tolist() == [k, k + 1][: k % 3]
            assert sample["iscrowd"].tolist() == [0, 1][: k % 3]
            np.testing.assert_array_equal(sample[mask], _mask(k))


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_table_with_boxes_and_a_mask_column(tmp_path: Path, kind: str) -> None:
    _files(tmp_path, 5)
    table = (_csv if kind == "csv" else _jsonl)(tmp_path / f"t.{kind}", _rows(5))
    fastloader.pack(table, tmp_path / "d.lmdb", workers=2)
    _check(tmp_path / "d.lmdb", 5)


def test_declared_columns_of_other_names(tmp_path: Path) -> None:
    _files(tmp_path, 4)
    rows = [{"path": r["path"], "bbs": r["boxes"], "box_labels": r["box_labels"],
             "iscrowd": r["iscrowd"], "seg": r["mask"]} for r in _rows(4)]
    table = _jsonl(tmp_path / "t.jsonl", rows)
    fastloader.pack(table, tmp_path / "d.h5", fields={"bbs": "boxes", "seg": "mask"},
                    workers=1)
    _check(tmp_path / "d.h5", 4, ("bbs", "seg"))


def _break(rows: list[dict[str, Any]], how: str) -> tuple[list[dict[str, Any]], str]:
    """rows with row 2 broken (line 4 of a CSV after its header, line 3 of a JSONL); the
    message, LINE standing for the line."""
    if how == "malformed":
        rows[2]["boxes"] = "[[1, 2, 3, 4]"
        return rows, r"LINE.*field 'boxes'.*is not JSON"
    if how == "no area":
        rows[2]["boxes"] = [[5, 5, 5, 9], [1, 1, 2, 2]]
        return rows, r"LINE.*field 'boxes'.*box 0 is \[5.0, 5.0, 5.0, 9.0\]"
    if how == "labels":
        rows[2]["box_labels"] = [1]
        return rows, r"LINE.*'box_labels' has 1 rows but 'boxes' has 2 boxes"
    if how == "missing mask":
        rows[2]["mask"] = "seg/none.png"
        return rows, r"LINE.*field 'mask'.*cannot read mask file .*none.png"
    rows[2]["mask"] = "seg/3.png"  # fine ...
    return rows, r"LINE.*field 'mask' \(mask\) is 24 x 32 \(H x W\) but its image is 24 x 30"


@pytest.mark.parametrize("how", ["malformed", "no area", "labels", "missing mask", "size"])
@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_bad_boxes_and_masks_in_a_table(tmp_path: Path, kind: str, how: str) -> None:
    _files(tmp_path, 5)
    if how == "size":  # ... but image 2 is narrower than its mask
        (tmp_path / "img" / "2.jpg").write_bytes(encode(photo_like(H, 30, 2)))
    rows, message = _break(_rows(5), how)
    line = "line 4" if kind == "csv" else "line 3"
    message = message.replace("LINE", line)
    table = (_csv if kind == "csv" else _jsonl)(tmp_path / f"t.{kind}", rows)
    with pytest.raises(PackError, match=message) as caught:
        fastloader.pack(table, tmp_path / "d.lmdb", workers=1)
    assert str(table) in str(caught.value)
    manifest = fastloader.pack(table, tmp_path / "d.lmdb", workers=2, skip_bad=True)
    assert manifest.num_samples == 4
    assert f"t.{kind} {line}:" in manifest.stats["skipped_samples"][0]["reason"]


def _group_members(k: int, plain: bool) -> dict[str, bytes]:
    boxes: Any = _boxes(k) if plain else {"boxes": _boxes(k), "box_labels": [k, k + 1][: k % 3],
                                          "iscrowd": [0, 1][: k % 3]}
    return {f"{k}.jpg": encode(photo_like(H, W, k)),
            f"{k}.mask.png": _png(_mask(k)),
            f"{k}.boxes.json": json.dumps(boxes).encode()}


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("source", ["folder", "tar"])
def test_webdataset_mask_png_and_boxes_json(tmp_path: Path, source: str) -> None:
    members = {name: data for k in range(5) for name, data in _group_members(k, False).items()}
    if source == "tar":
        src = _tar(tmp_path / "shard-000.tar", members)
    else:
        src = tmp_path / "groups"
        src.mkdir()
        for name, data in members.items():
            (src / name).write_bytes(data)
    fastloader.pack(src, tmp_path / "d.lmdb", workers=2)
    _check(tmp_path / "d.lmdb", 5, image="jpg")


def test_webdataset_boxes_json_as_a_plain_list(tmp_path: Path) -> None:
    members = {name: data for k in range(3) for name, data in _group_members(k, True).items()}
    fastloader.pack(_tar(tmp_path / "s.tar", members), tmp_path / "d.lmdb", workers=1)
    with fastloader.open_dataset(tmp_path / "d.lmdb") as ds:
        assert set(ds.fields) == {"jpg", "mask", "boxes"} and ds.fields["boxes"].per_box == ()
        np.testing.assert_allclose(ds.sample(2)["boxes"], np.reshape(_boxes(2), (-1, 4)))


@pytest.mark.parametrize("how, message", [
    ("malformed", r"s.tar member 2: .boxes.json is not JSON"),
    ("not boxes", r"s.tar member 2: .boxes.json is \{\"labels\": \[1\]\}; write a list"),
    ("no area", r"s.tar member 2: field 'boxes'.*box 0 is \[0.0, 0.0, 0.0, 0.0\]"),
    ("no mask", r"s.tar member 2: has no field 'mask'"),
    ("bad mask", r"s.tar member 2: field 'mask'.*is not an image Pillow recognises"),
])
def test_bad_webdataset_members_are_named(tmp_path: Path, how: str, message: str) -> None:
    members = {name: data for k in range(5) for name, data in _group_members(k, False).items()}
    if how == "malformed":
        members["2.boxes.json"] = b"[[1, 2"
    elif how == "not boxes":
        members["2.boxes.json"] = b'{"labels": [1]}'
    elif how == "no area":
        members["2.boxes.json"] = b'{"boxes": [[0, 0, 0, 0]], "box_labels": [1], "iscrowd": [0]}'
    elif how == "no mask":
        del members["2.mask.png"]
    else:
        members["2.mask.png"] = b"not a png"
    src = _tar(tmp_path / "s.tar", members)
    with pytest.raises(PackError, match=message):
        fastloader.pack(src, tmp_path / "d.lmdb", workers=1)
    manifest = fastloader.pack(src, tmp_path / "d.lmdb", workers=2, skip_bad=True)
    assert manifest.num_samples == 4 and manifest.stats["skipped"] == 1
