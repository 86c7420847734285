"""One batch's planned geometry: where each sample's source crop lands in the output.

The planner (decode/augment.py) walks the transforms over a `PlanState` and ends in a
`Geometry`: per sample an integer source crop (top, left, height, width), a left-right flip, and
where the resized crop sits in the batch's one output size (the whole output, or with ResizeFit
a rectangle of it, the rest filled: a letterbox). The decoder writes the pixels by it, and every
spatial field follows the same numbers: boxes (decode/boxes.py) and masks map a source point
(x, y) to (place_left + (x - left) * place_w / width, place_top + (y - top) * place_h / height),
mirrored as x -> place_left + place_w - (x - place_left) when flipped (inside the placed
rectangle: the flip never moves the image on the canvas). With EXIF orientation applied
(decode/orientation.py) the crops are boxes of each turned image, and a stored point is turned
with its image first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Geometry:
    """What the decoder did to each sample of a batch; reusable by any spatial field.

    Attributes:
        crops: int32 (N, 4) source boxes (top, left, height, width).
        flips: bool (N,) mirrored left-right (inside the placed rectangle).
        size: the batch's output (height, width).
        places: int32 (N, 4) (top, left, height, width) of the resized crop inside the output,
            the rest set to `fill`; None when every crop fills the whole output.
        fill: the value of every channel of the letterbox's padding.
        orientations: uint8 (N,) EXIF orientations the crops are planned on (None: as stored).
        stored: int (N, 2) stored (height, width) of each image (with orientations).
    """

    crops: np.ndarray
    flips: np.ndarray
    size: tuple[int, int]
    places: np.ndarray | None = None
    fill: int = 0
    orientations: np.ndarray | None = None
    stored: np.ndarray | None = None

    def placed(self) -> np.ndarray:
        """int32 (N, 4) (top, left, height, width) of each resized crop in the output."""
        if self.places is not None:
            return self.places
        rows = np.zeros((len(self.crops), 4), np.int32)
        rows[:, 2:] = self.size
        return rows

    def scale(self) -> np.ndarray:
        """float32 (N, 2) (x, y): output pixels per source pixel along each axis."""
        placed = self.placed().astype(np.float64)
        crops = np.maximum(self.crops.astype(np.float64), 1.0)
        return np.stack([placed[:, 3] / crops[:, 3], placed[:, 2] / crops[:, 2]],
                        axis=1).astype(np.float32).reshape(-1, 2)

    def pad(self) -> np.ndarray:
        """int64 (N, 4) (left, top, right, bottom): output pixels of fill around each image."""
        placed = self.placed().astype(np.int64)
        height, width = self.size
        return np.stack([placed[:, 1], placed[:, 0], width - placed[:, 1] - placed[:, 3],
                         height - placed[:, 0] - placed[:, 2]], axis=1).reshape(-1, 4)

    def sample(self, k: int) -> tuple[np.ndarray, bool, np.ndarray]:
        """Sample k's (crop, flip, place) rows."""
        return self.crops[k], bool(self.flips[k]), self.placed()[k]

    def with_sample(self, k: int, other: Geometry) -> Geometry:
        """A copy whose sample k is `other`'s only sample (a skipped sample's replacement)."""
        crops, flips = self.crops.copy(), self.flips.copy()
        crops[k], flips[k] = other.crops[0], other.flips[0]
        places = None
        if self.places is not None and other.places is not None:
            places = self.places.copy()
            places[k] = other.places[0]
        return replace(self, crops=crops, flips=flips, places=places,
                       orientations=_with_row(self.orientations, k, other.orientations),
                       stored=_with_row(self.stored, k, other.stored))

    def orientation(self, k: int) -> int:
        """Sample k's EXIF orientation (1: as stored)."""
        return 1 if self.orientations is None else int(self.orientations[k])


def _with_row(rows: np.ndarray | None, k: int, other: np.ndarray | None) -> np.ndarray | None:
    """A copy of rows whose row k is other's only row (None when either is None)."""
    if rows is None or other is None:
        return None
    rows = rows.copy()
    rows[k] = other[0]
    return rows


class PlanState:
    """Per-sample state while walking the transforms: a source box seen as a virtual image."""

    def __init__(self, shapes: np.ndarray) -> None:
        n = len(shapes)
        self.src_h = shapes[:, 0].astype(np.float64)
        self.src_w = shapes[:, 1].astype(np.float64)
        self.top = np.zeros(n)
        self.left = np.zeros(n)
        self.box_h = self.src_h.copy()
        self.box_w = self.src_w.copy()
        self.view_h = shapes[:, 0].astype(np.int64)  # the image size the next op sees
        self.view_w = shapes[:, 1].astype(np.int64)
        self.flip = np.zeros(n, dtype=bool)
        self.places: np.ndarray | None = None  # set by ResizeFit: (N, 4) in the view
        self.fill = 0

    def crop(self, top: np.ndarray, left: np.ndarray, h: np.ndarray, w: np.ndarray) -> None:
        """Narrow the box to a sub-box given in the current view's pixels."""
        scale_y = self.box_h / self.view_h
        scale_x = self.box_w / self.view_w
        left = np.where(self.flip, self.view_w - left - w, left)  # a flipped view mirrors x
        self.top = self.top + top * scale_y
        self.left = self.left + left * scale_x
        self.box_h = h * scale_y
        self.box_w = w * scale_x
        self.view_h = np.asarray(h, dtype=np.int64).copy()
        self.view_w = np.asarray(w, dtype=np.int64).copy()

    def to_view(self, k: int, boxes: np.ndarray) -> np.ndarray:
        """Sample k's source boxes (XYXY float) in its current view's pixels (unclipped)."""
        sx = self.view_w[k] / self.box_w[k]
        sy = self.view_h[k] / self.box_h[k]
        src = np.asarray(boxes, np.float64).reshape(-1, 4)
        x1, x2 = (src[:, 0] - self.left[k]) * sx, (src[:, 2] - self.left[k]) * sx
        y1, y2 = (src[:, 1] - self.top[k]) * sy, (src[:, 3] - self.top[k]) * sy
        if self.flip[k]:
            x1, x2 = self.view_w[k] - x2, self.view_w[k] - x1
        return np.stack([x1, y1, x2, y2], axis=1)

    def integer_crops(self) -> np.ndarray:
        """The box rounded to whole source pixels, clipped inside the image: int32 (N, 4)."""
        top = np.clip(np.rint(self.top), 0, self.src_h - 1)
        left = np.clip(np.rint(self.left), 0, self.src_w - 1)
        bottom = np.clip(np.rint(self.top + self.box_h), top + 1, self.src_h)
        right = np.clip(np.rint(self.left + self.box_w), left + 1, self.src_w)
        return np.stack([top, left, bottom - top, right - left], axis=1).astype(np.int32)
