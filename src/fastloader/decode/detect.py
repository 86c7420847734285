"""Detection transforms, planned like the others: ResizeFit (letterbox) and RandomIoUCrop.

ResizeFit ends a plan in a fixed square canvas with each image placed in a rectangle of it (the
decoder fills the rest); RandomIoUCrop draws SSD-style crops and keeps one only when a box of
the sample stays in it well enough, which needs the sample's boxes at plan time (augment's
plan_geometry takes them; the loader reads them from the dataset's boxes column).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fastloader.decode.geometry import PlanState
from fastloader.decode.transform_args import range_pair, size_pair
from fastloader.errors import invalid_argument, invalid_type

POSITIONS = ("center", "top-left")
CRITERIA = ("iou", "visibility")
SSD_OPTIONS: tuple[float | None, ...] = (None, 0.1, 0.3, 0.5, 0.7, 0.9)


@dataclass(frozen=True)
class ResizeFit:
    """Letterbox: the longest side to max_size (aspect kept), padded to a max_size square.

    Each image is resized so its longer side is max_size pixels (the shorter one rounded, at
    least 1) and placed in a max_size x max_size canvas, centred (position="center"; an odd
    leftover pixel goes to the bottom/right padding) or at the top-left corner
    (position="top-left"); every other pixel of the canvas is `fill` in all three channels.
    A flip after it mirrors the image inside its rectangle, which stays where it is. Only
    RandomHorizontalFlip may follow it. Batches of a dataset with fields then carry `scale`
    (float32 [B, 2]: x, y output pixels per source pixel of the crop) and `pad` (int64 [B, 4]:
    left, top, right, bottom pixels of fill), so an output point maps back to the source as
    x_src = (x - pad_left) / scale_x, y_src = (y - pad_top) / scale_y (plus the crop's origin
    when a crop came before it).

    Args:
        max_size: the canvas side and the resized longer side, in pixels.
        fill: the padding value, an int in [0, 255].
        position: "center" or "top-left".

    Raises:
        InvalidArgumentError: max_size is not positive, fill is outside [0, 255], or position
            is unknown.
        InvalidTypeError: max_size or fill is not an int.
    """

    max_size: int
    fill: int = 0
    position: str = "center"

    def __post_init__(self) -> None:
        if not isinstance(self.max_size, (int, np.integer)) or isinstance(self.max_size, bool):
            raise invalid_type("ResizeFit.max_size", self.max_size, "an int")
        size_pair("ResizeFit.max_size", int(self.max_size))
        if not isinstance(self.fill, (int, np.integer)) or isinstance(self.fill, bool):
            raise invalid_type("ResizeFit.fill", self.fill, "an int in [0, 255]")
        if not 0 <= int(self.fill) <= 255:
            raise invalid_argument("ResizeFit.fill", self.fill, "must lie in [0, 255]",
                                   "Pass e.g. 0 (black) or 114 (YOLO's grey).")
        if self.position not in POSITIONS:
            raise invalid_argument("ResizeFit.position", self.position,
                                   f"must be one of {POSITIONS}", "Pass 'center'.")


@dataclass(frozen=True)
class RandomIoUCrop:
    """SSD's box-aware random crop (torchvision's RandomIoUCrop), planned from the boxes.

    Per sample one option is drawn from `options`: None keeps the whole image; a number t asks
    for a crop where at least one box whose centre lies inside the crop scores >= t. The
    score is the box's IoU with the crop (criterion="iou", SSD's rule) or the fraction of the
    box's area inside the crop (criterion="visibility"). Up to `trials` candidates are drawn
    (width and height each a uniform min_scale..max_scale fraction of the image, width/height
    within the aspect range, a uniform position); the first that qualifies is kept. When none
    does, the sample keeps its whole image (unlike torchvision, which draws again without
    bound). A sample without boxes takes its first candidate of valid shape. A box that
    qualified stays in the batch when min_box_visibility <= its score (with criterion="iou",
    when min_box_visibility <= t: a box's visible fraction is at least its IoU). Crops vary in
    size, so a sizing transform must follow (Resize((h, w)), ResizeFit, RandomResizedCrop).
    All draws come from the batch's generator, a fixed number per sample, so the crops depend
    only on (seed, epoch, batch, rank) and the boxes.

    Args:
        min_scale: the smallest crop side as a fraction of the image side, in (0, 1].
        max_scale: the largest, in [min_scale, 1].
        min_aspect_ratio: the smallest crop width / height.
        max_aspect_ratio: the largest crop width / height.
        options: thresholds in [0, 1] and/or None, drawn uniformly; default SSD's
            (None, 0.1, 0.3, 0.5, 0.7, 0.9).
        trials: candidates per sample before the whole-image fallback (>= 1).
        criterion: "iou" or "visibility".
        field: the boxes field to read; None: the dataset's only boxes field.

    Raises:
        InvalidArgumentError: a scale, ratio, option or trials value is out of range, or the
            criterion is unknown.
        InvalidTypeError: options is not a sequence, or field is not a string.
    """

    min_scale: float = 0.3
    max_scale: float = 1.0
    min_aspect_ratio: float = 0.5
    max_aspect_ratio: float = 2.0
    options: Sequence[float | None] = SSD_OPTIONS
    trials: int = 40
    criterion: str = "iou"
    field: str | None = None

    def __post_init__(self) -> None:
        _, high = range_pair("RandomIoUCrop.min_scale/max_scale",
                               (self.min_scale, self.max_scale))
        if high > 1:
            raise invalid_argument("RandomIoUCrop.max_scale", self.max_scale,
                                   "a crop side cannot exceed the image side", "Pass <= 1.0.")
        range_pair("RandomIoUCrop.min_aspect_ratio/max_aspect_ratio",
                   (self.min_aspect_ratio, self.max_aspect_ratio))
        object.__setattr__(self, "options", _options(self.options))
        if (not isinstance(self.trials, int) or isinstance(self.trials, bool)
                or not 1 <= self.trials <= 1000):
            raise invalid_argument("RandomIoUCrop.trials", self.trials,
                                   "must be an int in [1, 1000]", "Pass e.g. 40 (SSD's).")
        if self.criterion not in CRITERIA:
            raise invalid_argument("RandomIoUCrop.criterion", self.criterion,
                                   f"must be one of {CRITERIA}", "Pass 'iou' (SSD's rule).")
        if self.field is not None and not isinstance(self.field, str):
            raise invalid_type("RandomIoUCrop.field", self.field, "a field name or None")


def _options(options: object) -> tuple[float | None, ...]:
    if isinstance(options, (str, bytes)) or not isinstance(options, Sequence) or not options:
        raise invalid_type("RandomIoUCrop.options", options,
                           "a non-empty sequence of thresholds in [0, 1] or None")
    checked: list[float | None] = []
    for value in options:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0.0 <= float(value) <= 1.0 or math.isnan(value)):
            raise invalid_argument("RandomIoUCrop.options", list(options),
                                   "each option must be None (no crop) or a number in [0, 1]",
                                   "Pass e.g. (None, 0.1, 0.3, 0.5, 0.7, 0.9).")
        checked.append(None if value is None else float(value))
    return tuple(checked)


def plan_resize_fit(op: ResizeFit, state: PlanState) -> None:
    """Place each view, longer side to max_size, in the max_size square; the view becomes it."""
    side = int(op.max_size)
    longest = np.maximum(state.view_h, state.view_w).astype(np.float64)
    inner_h = np.clip(np.rint(state.view_h * side / longest), 1, side).astype(np.int64)
    inner_w = np.clip(np.rint(state.view_w * side / longest), 1, side).astype(np.int64)
    if op.position == "center":
        top, left = (side - inner_h) // 2, (side - inner_w) // 2
    else:
        top, left = np.zeros_like(inner_h), np.zeros_like(inner_w)
    state.places = np.stack([top, left, inner_h, inner_w], axis=1).astype(np.int32)
    state.fill = int(op.fill)
    state.view_h = np.full(len(state.flip), side, dtype=np.int64)
    state.view_w = np.full(len(state.flip), side, dtype=np.int64)


def _scores(op: RandomIoUCrop, boxes: np.ndarray, crops: np.ndarray) -> np.ndarray:
    """(T, K) scores of K view boxes against T candidate crops (x1, y1, x2, y2); -1 where the
    box's centre is outside the crop."""
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    x1, y1, x2, y2 = (crops[:, i:i + 1] for i in range(4))
    inside = (x1 < cx) & (cx < x2) & (y1 < cy) & (cy < y2)
    iw = np.clip(np.minimum(x2, boxes[:, 2]) - np.maximum(x1, boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(y2, boxes[:, 3]) - np.maximum(y1, boxes[:, 1]), 0, None)
    inter = iw * ih
    box_area = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(
        boxes[:, 3] - boxes[:, 1], 0, None)
    denominator = (box_area if op.criterion == "visibility"
                   else (x2 - x1) * (y2 - y1) + box_area - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(denominator > 0, inter / np.where(denominator > 0, denominator, 1), 0.0)
    return np.where(inside, score, -1.0)


def plan_iou_crop(op: RandomIoUCrop, state: PlanState, rng: np.random.Generator,
                  boxes: Sequence[np.ndarray]) -> None:
    """Crop each view to its first qualifying candidate (or keep it whole), as documented."""
    n, trials = len(state.flip), op.trials
    picks = rng.integers(len(op.options), size=n)  # a fixed number of draws per sample
    sides = rng.uniform(op.min_scale, op.max_scale, size=(n, trials, 2))
    where = rng.random((n, trials, 2))
    top, left = np.zeros(n, np.int64), np.zeros(n, np.int64)
    height, width = state.view_h.copy(), state.view_w.copy()
    for k in range(n):
        threshold = op.options[int(picks[k])]
        if threshold is None:
            continue
        vh, vw = int(state.view_h[k]), int(state.view_w[k])
        cw = np.floor(vw * sides[k, :, 0]).astype(np.int64)
        ch = np.floor(vh * sides[k, :, 1]).astype(np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            aspect = cw / np.maximum(ch, 1)
        ok = (cw > 0) & (ch > 0) & (aspect >= op.min_aspect_ratio) & (
            aspect <= op.max_aspect_ratio)
        x0 = np.floor((vw - cw) * where[k, :, 0]).astype(np.int64)
        y0 = np.floor((vh - ch) * where[k, :, 1]).astype(np.int64)
        sample = np.asarray(boxes[k], np.float64).reshape(-1, 4)
        if len(sample):
            crops = np.stack([x0, y0, x0 + cw, y0 + ch], axis=1).astype(np.float64)
            ok &= (_scores(op, state.to_view(k, sample), crops) >= threshold).any(axis=1)
        if ok.any():
            first = int(ok.argmax())
            top[k], left[k], height[k], width[k] = y0[first], x0[first], ch[first], cw[first]
    state.crop(top, left, height, width)
