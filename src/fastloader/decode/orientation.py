"""EXIF orientation on request: images shown as PIL.ImageOps.exif_transpose turns them.

Orientation o (1-8) moves the stored pixels S (H x W) as exif_transpose does: 2 mirrors, 3
turns 180 degrees, 4 flips top-bottom, 5-8 transpose (the turned image is W x H). As the source
pixel of each turned pixel O[y][x] (csrc/orientation.h says the same): without a transpose
S[fy ? H-1-y : y][fx ? W-1-x : x], with it S[fy ? H-1-x : x][fx ? W-1-y : y]. Crops are
planned on the turned image; the decoder maps each crop back to the stored pixels and writes
the turned result. Boxes and masks are stored in the stored pixels (as the source gave them)
and are turned with their image before its crop plan moves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from fastloader.decode.geometry import Geometry
from fastloader.errors import invalid_argument

# orientation -> (transpose, flip_y, flip_x); 1 (and any value exif_transpose ignores): none
MOVES = {1: (False, False, False), 2: (False, False, True), 3: (False, True, True),
         4: (False, True, False), 5: (True, False, False), 6: (True, True, False),
         7: (True, True, True), 8: (True, False, True)}
_TRANSPOSED = np.array([False] + [MOVES[o][0] for o in range(1, 9)])
_FLIP_Y = np.array([False] + [MOVES[o][1] for o in range(1, 9)])
_FLIP_X = np.array([False] + [MOVES[o][2] for o in range(1, 9)])


def check_orientations(values: object, n: int) -> np.ndarray:
    """values as uint8 (n,) EXIF orientations in 1..8, or an InvalidArgumentError."""
    try:
        array = np.asarray(values).reshape(-1)
    except (TypeError, ValueError):
        array = np.zeros(0)
    if array.shape != (n,) or array.dtype.kind not in "iu" or (
            n and (array.min() < 1 or array.max() > 8)):
        raise invalid_argument("orientations", f"{array.dtype} array of shape {array.shape}",
                               f"it must hold {n} EXIF orientations, ints in 1..8",
                               "Pass one per record (1: as stored).")
    return np.ascontiguousarray(array, np.uint8)


def turned_shapes(shapes: np.ndarray, orientations: np.ndarray) -> np.ndarray:
    """(N, 2) (height, width) of each image as its orientation shows it (5-8 swap them); its
    own inverse: the stored shapes of turned ones."""
    shapes = np.asarray(shapes).reshape(-1, 2)
    swap = _TRANSPOSED[np.asarray(orientations, np.intp)]
    return np.where(swap[:, None], shapes[:, ::-1], shapes)


def turn_boxes(boxes: np.ndarray, stored: np.ndarray, orientations: np.ndarray) -> np.ndarray:
    """Boxes (float [k, 4] XYXY, stored pixels; row j of an image stored[j] (H, W) with
    orientations[j]) as boxes of the turned images: their corners moved, then reordered."""
    src = np.asarray(boxes, np.float64).reshape(-1, 4)
    o = np.asarray(orientations, np.intp)
    height, width = (np.asarray(stored, np.float64).reshape(-1, 2)[:, i] for i in (0, 1))
    x1 = np.where(_FLIP_X[o], width - src[:, 2], src[:, 0])
    x2 = np.where(_FLIP_X[o], width - src[:, 0], src[:, 2])
    y1 = np.where(_FLIP_Y[o], height - src[:, 3], src[:, 1])
    y2 = np.where(_FLIP_Y[o], height - src[:, 1], src[:, 3])
    # stored x becomes the turned y under a transpose, stored y the turned x
    t = _TRANSPOSED[o]
    return np.stack([np.where(t, y1, x1), np.where(t, x1, y1), np.where(t, y2, x2),
                     np.where(t, x2, y2)], axis=1)


def turn_array(array: np.ndarray, orientation: int) -> np.ndarray:
    """An (H, W, ...) array as `orientation` shows it: a view, exif_transpose's pixels."""
    transpose, flip_y, flip_x = MOVES.get(int(orientation), MOVES[1])
    turned = array[::-1 if flip_y else 1, ::-1 if flip_x else 1]
    return turned.swapaxes(0, 1) if transpose else turned


class Turns:
    """How a loader shows a dataset's images: their stored (height, width) and, when EXIF
    orientation is applied, each image's orientation (None: every image as stored).

    `shapes` is what crops are planned on (the turned sizes when applied).
    """

    def __init__(self, stored: np.ndarray, orientations: np.ndarray | None,
                 shapes: np.ndarray | None = None) -> None:
        # shapes: the turned sizes where the caller holds them already (an oriented pack's
        # index stores them), so they are not worked out again from the stored ones
        self.stored = np.asarray(stored)
        self.orientations = orientations
        if orientations is None:
            self.shapes = self.stored
        else:
            self.shapes = (turned_shapes(self.stored, orientations) if shapes is None
                           else np.asarray(shapes))

    def of(self, samples: Sequence[int] | np.ndarray) -> np.ndarray | None:
        """The samples' orientations (uint8), or None when not applied."""
        if self.orientations is None:
            return None
        return np.ascontiguousarray(self.orientations[np.asarray(samples, np.intp)], np.uint8)

    def boxes(self, samples: np.ndarray, boxes: list[np.ndarray] | None
              ) -> list[np.ndarray] | None:
        """Each sample's boxes (stored pixels) as boxes of its turned image."""
        if boxes is None or self.orientations is None:
            return boxes
        rows = np.asarray(samples, np.intp)
        return [turn_boxes(b, np.repeat(self.stored[i][None], len(b), 0),
                           np.full(len(b), self.orientations[i]))
                for b, i in zip(boxes, rows.tolist(), strict=True)]

    def attach(self, geometry: Geometry, samples: Sequence[int] | np.ndarray) -> Geometry:
        """The samples' geometry (planned on self.shapes) with their orientations and stored
        sizes, which the decoder, boxes and masks read."""
        if self.orientations is None:
            return geometry
        rows = np.asarray(samples, np.intp)
        return replace(geometry, orientations=self.of(rows), stored=self.stored[rows])
