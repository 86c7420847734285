"""COCO detection annotations (instances.json) -> samples: image, boxes, box_labels, iscrowd,
image_id.

Boxes come from COCO's XYWH as XYXY source pixels; box_labels are contiguous ids 0..C-1 in the
ascending order of the COCO category ids (the names and original ids go to the manifest's
source entry). A file that names a category not in `categories`, a box that is not finite or
has no area, or an annotation for an unknown image stops the pack naming the file and the
annotation id (`skip_bad` skips that image instead); images without annotations are kept
(empty boxes) unless skip_empty. With masks, each image's segmentations also become a semantic
`mask` field, rasterized in the pack workers (sources/coco_masks.py, sources/rasterize.py).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec, make_spec
from fastloader.pack.sources import coco_masks
from fastloader.pack.sources.rasterize import IGNORE, Instance
from fastloader.pack.sources.types import Description, Sample
from fastloader.pack.sources.values import ERROR_KEY, PATH_KEY, WHERE_KEY

COCO_KEYS = ("images", "annotations", "categories")
FIELDS = {"image": "image", "boxes": ("boxes", ["box_labels", "iscrowd"]),
          "box_labels": ("ndarray", "int64", (-1,)), "iscrowd": ("ndarray", "uint8", (-1,)),
          "image_id": "int"}


class _Image(TypedDict):
    """One image's entry and what its annotations gave, gathered before its sample is made."""

    entry: dict[str, Any]  # the COCO JSON entry, as read (id and file_name checked)
    boxes: list[list[float]]
    labels: list[int]
    crowd: list[int]
    instances: list[Instance]
    error: str | None


def _load(path: Path) -> dict[str, Any]:  # the COCO JSON, as read (its lists checked)
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PackError(f"{path}: cannot read it as JSON ({exc}); pass a COCO instances file."
                        ) from None
    if not isinstance(data, dict) or any(not isinstance(data.get(k), list) for k in COCO_KEYS):
        raise PackError(f"{path}: not a COCO detection file: it needs lists 'images', "
                        "'annotations' and 'categories'.")
    return data


def _categories(path: Path, raw: list[object]) -> dict[int, int]:
    """COCO category id -> contiguous id (ascending COCO ids)."""
    ids = []
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
            raise PackError(f"{path}: a category is {entry!r:.80}; each needs an int 'id'.")
        ids.append(entry["id"])
    if len(set(ids)) != len(ids):
        raise PackError(f"{path}: a category id appears twice in 'categories'.")
    return {cid: k for k, cid in enumerate(sorted(ids))}


def _box(path: Path, ann: Mapping[str, object]) -> list[float] | str:
    """XYXY of an annotation's XYWH bbox, or why it is bad."""
    bbox = ann.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in bbox):
        return f"{path}: annotation {ann.get('id')!r} has bbox {bbox!r:.60}, not 4 finite numbers"
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        return (f"{path}: annotation {ann.get('id')!r} has bbox {bbox} with no area (width and "
                "height must be > 0); fix or remove it, or pass skip_bad=True")
    return [x, y, x + w, y + h]


def open_coco(src: str | os.PathLike[str], root: str | os.PathLike[str] | None,
              skip_empty: bool, masks: bool = False
              ) -> tuple[Sequence[Sample], list[FieldSpec], Description]:
    """(samples, specs, source) of a COCO file; images under root (default: its folder);
    with masks a `mask` field too."""
    path = Path(src).expanduser()
    data = _load(path)
    folder = Path(root).expanduser() if root is not None else path.parent
    ids = _categories(path, data["categories"])
    if masks:
        coco_masks.check_classes(path, len(ids))
    images: dict[int, _Image] = {}
    for entry in data["images"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int) or not \
                isinstance(entry.get("file_name"), str):
            raise PackError(f"{path}: an image entry is {entry!r:.80}; each needs an int 'id' "
                            "and a 'file_name'.")
        images[entry["id"]] = {"entry": entry, "boxes": [], "labels": [], "crowd": [],
                               "instances": [], "error": None}
    for ann in data["annotations"]:
        if not isinstance(ann, dict) or ann.get("image_id") not in images:
            name = ann.get("id") if isinstance(ann, dict) else ann
            raise PackError(f"{path}: annotation {name!r:.60} refers to an image id not in "
                            "'images'.")
        if ann.get("category_id") not in ids:
            raise PackError(f"{path}: annotation {ann.get('id')!r} has category_id "
                            f"{ann.get('category_id')!r}, which is not in 'categories' "
                            f"({sorted(ids)[:10]}...).")
        image = images[ann["image_id"]]
        box = _box(path, ann)
        if isinstance(box, str):
            image["error"] = image["error"] or box
            continue
        if masks:
            painted = coco_masks.instance(path, ann, ids[ann["category_id"]])
            if isinstance(painted, str):
                image["error"] = image["error"] or painted
                continue
            image["instances"].append(painted)
        image["boxes"].append(box)
        image["labels"].append(ids[ann["category_id"]])
        image["crowd"].append(1 if ann.get("iscrowd") else 0)
    kept = [(image_id, image) for image_id, image in images.items()
            if image["boxes"] or image["error"] or not skip_empty]
    samples: Sequence[Sample] = [_sample(path, folder, image_id, image)
                                         for image_id, image in kept]
    specs = [make_spec(name, spec) for name, spec in FIELDS.items()]
    if masks:
        samples = coco_masks.MaskedSamples(list(samples), [image["entry"] for _, image in kept],
                                           [image["instances"] for _, image in kept])
        specs.append(make_spec("mask", "mask"))
    categories = sorted(data["categories"], key=lambda c: c["id"])
    source: Description = {
        "kind": "coco", "path": str(path), "images": str(folder),
        "categories": [{"id": c["id"], "name": str(c.get("name", c["id"]))} for c in categories]}
    if masks:  # what a mask pixel means, beside the category names
        source["mask_values"] = {"background": 0, "class": "box_labels id + 1",
                                 "crowd": IGNORE}
    return samples, specs, source


def _sample(path: Path, folder: Path, image_id: int, image: _Image) -> Sample:
    file = folder / image["entry"]["file_name"]
    where = f"{path}: image id {image_id} ({file})"
    if image["error"]:
        return {WHERE_KEY: where, PATH_KEY: str(file), ERROR_KEY: image["error"]}
    if not file.is_file():
        return {WHERE_KEY: where, PATH_KEY: str(file),
                ERROR_KEY: f"image file {file} is missing; pass root=DIR (the folder the "
                           "file_name entries are relative to)"}
    return {WHERE_KEY: where, PATH_KEY: str(file), "image": str(file),
            "boxes": np.asarray(image["boxes"], np.float32).reshape(-1, 4),
            "box_labels": np.asarray(image["labels"], np.int64),
            "iscrowd": np.asarray(image["crowd"], np.uint8), "image_id": image_id}
