"""The boxes kind: float32 [k, 4] XYXY in source pixels per sample, with per-box fields kept in
step; in a batch mapped through each sample's crop plan (decode/boxes.py), clipped, the boxes
less visible than min_box_visibility dropped with their per-box rows."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import TYPE_CHECKING

import numpy as np

from fastloader.decode.boxes import map_batch_boxes
from fastloader.format.kinds.arrays import NdarrayKind, as_array
from fastloader.format.kinds.base import BadValue, Batch, Spec, StoreContext
from fastloader.format.kinds.device import arrays_to_device

if TYPE_CHECKING:
    import torch

    from fastloader.decode.geometry import Geometry

BOXES_DTYPE, BOXES_SHAPE = "float32", (-1, 4)  # XYXY in source pixels, one row per box


class BoxesKind(NdarrayKind):
    """("boxes", PER_BOX_FIELDS): XYXY boxes, and the fields that hold one row per box."""

    def from_tuple(self, items: tuple[object, ...] | list[object]) -> dict[str, object] | None:
        return {"kind": self.name, "per_box": items[1]} if len(items) == 2 else None

    def build(self, name: str, entry: Mapping[str, object], bad: type[Exception], where: str
              ) -> dict[str, object]:
        names = entry.get("per_box", ())
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise bad(f"{where}: boxes field {name!r}: per_box {names!r:.60} is not a list of "
                      "field names; write e.g. ('boxes', ['box_labels']).")
        return {"dtype": BOXES_DTYPE, "shape": BOXES_SHAPE, "per_box": tuple(names)}

    def bare(self) -> str | tuple[object, ...]:
        return self.name  # ("boxes", ()): per-box fields are found by name

    def to_json(self, spec: Spec) -> dict[str, object]:
        return {"per_box": list(spec.per_box)}

    def describe(self, spec: Spec) -> str:
        return f"boxes XYXY float32 (-1, 4), per box {list(spec.per_box)}"

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> np.ndarray:
        """float32 [k, 4] XYXY: finite, positive width and height (an empty list is no boxes)."""
        if isinstance(value, (list, tuple)) and len(value) == 0:
            return np.zeros((0, 4), np.float32)
        boxes = as_array(spec, value)
        bad = ~np.isfinite(boxes).all(axis=1) | (boxes[:, 2] <= boxes[:, 0]) | (
            boxes[:, 3] <= boxes[:, 1])
        if bad.any():
            k = int(np.argmax(bad))
            raise BadValue(f"box {k} is {boxes[k].tolist()}: boxes are XYXY (x1, y1, x2, y2) in "
                           "source pixels with x2 > x1 and y2 > y1, all finite; fix or drop it")
        return boxes

    def check_rows(self, spec: Spec, values: dict[str, Sized]) -> str | None:
        for name in spec.per_box:
            if len(values[name]) != len(values[spec.name]):
                return (f"field {name!r} has {len(values[name])} rows but {spec.name!r} has "
                        f"{len(values[spec.name])} boxes; a per-box field has one row a box")
        return None

    def from_bytes(self, spec: Spec, data: bytes) -> np.ndarray:
        raise ValueError(f"no reader for kind {self.name!r}")

    def collate(self, spec: Spec, batch: Batch, indices: np.ndarray,
                device: torch.device) -> list[torch.Tensor]:
        return batch.boxes(spec.name)

    def map_batch(self, boxes: list[np.ndarray], geometry: Geometry, min_visibility: float,
                  device: torch.device) -> tuple[list[torch.Tensor], list[np.ndarray]]:
        """A batch's boxes in output pixels on device, and each sample's keep mask."""
        mapped, keeps = map_batch_boxes(boxes, geometry, min_visibility)
        return arrays_to_device(mapped, device), keeps
