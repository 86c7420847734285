"""Decode-time transforms: turn per-sample random crop/flip choices into crop boxes and flips.

Each transform follows torchvision's semantics for its parameters, but instead of touching
pixels it moves a box over the *source* image; the decoder then decodes only that box, resizes
it to the output size and flips it, in one pass. Random draws come from a numpy Generator the
caller seeds (the loader uses (seed, epoch, batch, rank)), so a batch can be planned again
alone and the thread count never changes a result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fastloader.decode.detect import RandomIoUCrop, ResizeFit, plan_iou_crop, plan_resize_fit
from fastloader.decode.geometry import Geometry, PlanState
from fastloader.decode.transform_args import range_pair as _range_pair
from fastloader.decode.transform_args import size_pair as _size_pair
from fastloader.errors import invalid_argument, invalid_type

MAX_TRIES = 10  # torchvision's RandomResizedCrop tries 10 boxes before its centre fallback


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's RandomResizedCrop: a random area/aspect box of the image, resized to size.

    Planned per batch from (seed, epoch, batch, rank) and fused into the decode.

    Args:
        size: output size, an int (square) or (height, width).
        scale: range of the box's area as a fraction of the image, within (0, 1].
        ratio: range of the box's aspect ratio (width / height).

    Raises:
        InvalidArgumentError: a size is not positive, or a range is empty or out of bounds.
        InvalidTypeError: size is not an int or a pair of ints.
    """

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    out: tuple[int, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", _size_pair("RandomResizedCrop.size", self.size))
        object.__setattr__(self, "scale", _range_pair("RandomResizedCrop.scale", self.scale))
        object.__setattr__(self, "ratio", _range_pair("RandomResizedCrop.ratio", self.ratio))
        if self.scale[1] > 1:
            raise invalid_argument(
                "RandomResizedCrop.scale", self.scale, "the area fraction cannot exceed 1",
                "Pass a range inside (0, 1], e.g. (0.08, 1.0).",
            )


@dataclass(frozen=True)
class Resize:
    """torchvision's Resize: scale the image to size.

    Args:
        size: an int matches the shorter side (aspect kept), a pair sets (height, width).

    Raises:
        InvalidArgumentError: a size is not positive.
        InvalidTypeError: size is not an int or a pair of ints.
    """

    size: int | tuple[int, int]

    def __post_init__(self) -> None:
        _size_pair("Resize.size", self.size)


@dataclass(frozen=True)
class CenterCrop:
    """torchvision's CenterCrop: the centred box of size; a smaller image is stretched, not padded.

    Args:
        size: an int (square) or (height, width).

    Raises:
        InvalidArgumentError: a size is not positive.
        InvalidTypeError: size is not an int or a pair of ints.
    """

    size: int | tuple[int, int]
    out: tuple[int, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", _size_pair("CenterCrop.size", self.size))


@dataclass(frozen=True)
class RandomHorizontalFlip:
    """torchvision's RandomHorizontalFlip: mirror left-right with probability p.

    Args:
        p: the probability of a flip, in [0, 1].

    Raises:
        InvalidArgumentError: p is outside [0, 1].
        InvalidTypeError: p is not a number.
    """

    p: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)):
            raise invalid_type("RandomHorizontalFlip.p", self.p, "a float in [0, 1]")
        if not 0.0 <= float(self.p) <= 1.0:
            raise invalid_argument(
                "RandomHorizontalFlip.p", self.p, "must lie in [0, 1]", "Pass e.g. 0.5."
            )


Transform = (RandomResizedCrop | Resize | CenterCrop | RandomHorizontalFlip | ResizeFit
             | RandomIoUCrop)
_KINDS = (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ResizeFit, RandomIoUCrop)


def check_transforms(transforms: object, argument: str = "transforms",
                     positions: Sequence[int] | None = None) -> tuple[Transform, ...]:
    """Validate a transform or a list of them; return them as a tuple. An error names the
    item as argument[position]: positions are the items' places in what the user passed
    (default 0, 1, ...), where that held other things too (pixel ops, split off before)."""
    if transforms is None:
        return ()
    items = list(transforms) if isinstance(transforms, (list, tuple)) else [transforms]
    places = list(positions) if positions is not None else list(range(len(items)))
    checked: list[Transform] = []
    for k, item in enumerate(items):
        where = f"{argument}[{places[k]}]"
        if not isinstance(item, _KINDS):
            raise invalid_argument(
                where, item,
                "only fastloader.RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, "
                "ResizeFit and RandomIoUCrop run at decode time",
                "Use those, or pass a torch Dataset that applies any transform (drop-in path).",
            )
        if any(isinstance(op, ResizeFit) for op in checked) and not isinstance(
                item, RandomHorizontalFlip):
            raise invalid_argument(
                where, item, "only RandomHorizontalFlip may follow ResizeFit (its "
                "canvas is padded: a later crop or resize would move the padding)",
                "Put ResizeFit last, e.g. [RandomIoUCrop(), ResizeFit(512), "
                "RandomHorizontalFlip()].")
        checked.append(item)
    return tuple(checked)


def needs_boxes(transforms: Sequence[Transform]) -> list[RandomIoUCrop]:
    """The transforms that read each sample's boxes at plan time."""
    return [op for op in transforms if isinstance(op, RandomIoUCrop)]


def refuse_detection(transforms: Sequence[Transform], where: str, fix: str) -> None:
    """Raise when ResizeFit or RandomIoUCrop is given to a path that cannot run them."""
    for k, op in enumerate(transforms):
        if isinstance(op, (ResizeFit, RandomIoUCrop)):
            raise invalid_argument(f"transforms[{k}]", op, f"{type(op).__name__} is not "
                                   f"supported by {where}", fix)


def _random_resized_crop(op: RandomResizedCrop, boxes: PlanState, rng: np.random.Generator) -> None:
    """torchvision's get_params, vectorised: first of 10 valid tries, else the centre fallback."""
    n = len(boxes.flip)
    height, width = boxes.view_h, boxes.view_w
    area = (height * width)[:, None]
    log_lo, log_hi = math.log(op.ratio[0]), math.log(op.ratio[1])
    target = area * rng.uniform(op.scale[0], op.scale[1], size=(n, MAX_TRIES))
    aspect = np.exp(rng.uniform(log_lo, log_hi, size=(n, MAX_TRIES)))
    try_w = np.rint(np.sqrt(target * aspect)).astype(np.int64)
    try_h = np.rint(np.sqrt(target / aspect)).astype(np.int64)
    valid = (try_w > 0) & (try_w <= width[:, None]) & (try_h > 0) & (try_h <= height[:, None])
    first = valid.argmax(axis=1)
    found = valid[np.arange(n), first]
    u_top, u_left = rng.random(n), rng.random(n)
    # Centre fallback: clamp the aspect ratio into the allowed range.
    in_ratio = width / height
    fb_w = np.where(in_ratio < op.ratio[0], width, np.where(
        in_ratio > op.ratio[1], np.rint(height * op.ratio[1]), width)).astype(np.int64)
    fb_h = np.where(in_ratio < op.ratio[0], np.rint(width / op.ratio[0]), height).astype(np.int64)
    h = np.where(found, try_h[np.arange(n), first], fb_h)
    w = np.where(found, try_w[np.arange(n), first], fb_w)
    top = np.where(found, np.floor(u_top * (height - h + 1)), (height - h) // 2)
    left = np.where(found, np.floor(u_left * (width - w + 1)), (width - w) // 2)
    boxes.crop(top, left, h, w)
    boxes.view_h = np.full(n, op.out[0], dtype=np.int64)
    boxes.view_w = np.full(n, op.out[1], dtype=np.int64)


def _resize(op: Resize, boxes: PlanState) -> None:
    """Change the view's size only; the source box stays (resizing is fused into decode)."""
    if isinstance(op.size, (int, np.integer)):
        short = np.minimum(boxes.view_h, boxes.view_w)
        long = np.maximum(boxes.view_h, boxes.view_w)
        new_long = (int(op.size) * long // short).astype(np.int64)  # torchvision truncates
        tall = boxes.view_h > boxes.view_w
        boxes.view_h = np.where(tall, new_long, int(op.size))
        boxes.view_w = np.where(tall, int(op.size), new_long)
    else:
        boxes.view_h = np.full(len(boxes.flip), op.size[0], dtype=np.int64)
        boxes.view_w = np.full(len(boxes.flip), op.size[1], dtype=np.int64)


def _center_crop(op: CenterCrop, boxes: PlanState) -> None:
    crop_h = np.minimum(op.out[0], boxes.view_h)
    crop_w = np.minimum(op.out[1], boxes.view_w)
    top = np.rint((boxes.view_h - crop_h) / 2.0)
    left = np.rint((boxes.view_w - crop_w) / 2.0)
    boxes.crop(top, left, crop_h, crop_w)
    boxes.view_h = np.full(len(boxes.flip), op.out[0], dtype=np.int64)
    boxes.view_w = np.full(len(boxes.flip), op.out[1], dtype=np.int64)


def plan_geometry(
    transforms: Sequence[Transform], shapes: np.ndarray, rng: np.random.Generator,
    boxes: Sequence[np.ndarray] | None = None,
) -> Geometry:
    """Draw every sample's crop box, flip and placement: the batch's Geometry.

    Args:
        transforms: checked transforms (check_transforms).
        shapes: (N, 2) source (height, width).
        rng: the batch's generator (batch_rng).
        boxes: each sample's boxes (float [k, 4] XYXY, source pixels); needed by RandomIoUCrop.

    Returns:
        Geometry: crops int32 (N, 4) (top, left, height, width), flips, the output size and,
        after ResizeFit, each image's rectangle in it.

    Raises:
        InvalidArgumentError: the transforms leave samples of different output sizes, a shape
            is not positive, or RandomIoUCrop has no boxes.
    """
    shapes = np.asarray(shapes, dtype=np.int64).reshape(-1, 2)
    if len(shapes) and shapes.min() <= 0:
        raise invalid_argument("shapes", shapes.min(), "image sizes must be positive",
                               "Repack the dataset; its index holds an empty image.")
    state = PlanState(shapes)
    for op in transforms:
        if isinstance(op, RandomResizedCrop):
            _random_resized_crop(op, state, rng)
        elif isinstance(op, Resize):
            _resize(op, state)
        elif isinstance(op, CenterCrop):
            _center_crop(op, state)
        elif isinstance(op, ResizeFit):
            plan_resize_fit(op, state)
        elif isinstance(op, RandomIoUCrop):
            if boxes is None or len(boxes) != len(shapes):
                raise invalid_argument("boxes", None if boxes is None else len(boxes),
                                       "RandomIoUCrop plans from each sample's boxes",
                                       "Pass one boxes array per sample (a dataset with a "
                                       "boxes field).")
            plan_iou_crop(op, state, rng, boxes)
        else:
            state.flip ^= rng.random(len(state.flip)) < float(op.p)
    return Geometry(state.integer_crops(), state.flip.copy(), _uniform_size(state, transforms),
                    state.places, state.fill)


def plan(
    transforms: Sequence[Transform], shapes: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Draw every sample's crop box (int32 (N,4): top, left, height, width) and flip.

    `shapes` is (N, 2) source (height, width). Returns (crops, flips, (out_h, out_w)); raises
    InvalidArgumentError when the transforms leave samples of different output sizes, or hold
    ResizeFit or RandomIoUCrop (their plans need plan_geometry: placements, boxes).
    """
    refuse_detection(transforms, "this planner", "Use plan_geometry(), which gives each "
                     "sample's placement and takes the boxes.")
    geometry = plan_geometry(transforms, shapes, rng)
    return geometry.crops, geometry.flips, geometry.size


def _fixed_size_fix(transforms: Sequence[Transform]) -> str:
    """How to make these transforms end in one size (the error of _uniform_size)."""
    sized = [op for op in transforms if not isinstance(op, RandomHorizontalFlip)]
    last = sized[-1] if sized else None
    if isinstance(last, Resize) and isinstance(last.size, int):
        return (f"Resize({last.size}) sets the shorter side and keeps the aspect ratio, so "
                f"images of different shapes stay different: add CenterCrop({last.size}) "
                f"after it, or pass Resize(({last.size}, {last.size})).")
    if isinstance(last, RandomIoUCrop):
        return ("RandomIoUCrop's crops vary in size: follow it with ResizeFit(512) or "
                "Resize((512, 512)).")
    return ("Pass transforms that end in a fixed size: [Resize(256), CenterCrop(224)] for "
            "validation or [RandomResizedCrop(224), RandomHorizontalFlip()] for training.")


def _uniform_size(boxes: PlanState, transforms: Sequence[Transform]) -> tuple[int, int]:
    if len(boxes.view_h) == 0:
        return (0, 0)
    height, width = int(boxes.view_h[0]), int(boxes.view_w[0])
    if (boxes.view_h == height).all() and (boxes.view_w == width).all():
        return height, width  # every batch with fixed-size transforms: no per-sample set
    sizes = set(zip(boxes.view_h.tolist(), boxes.view_w.tolist(), strict=True))
    if len(sizes) > 1:
        shown = sorted(sizes)[:4]
        raise invalid_argument(
            "transforms", list(transforms) or None,
            f"images would come out in {len(sizes)} different sizes (e.g. {shown}), "
            "and a batch needs one size", _fixed_size_fix(transforms))
    (size,) = sizes
    return size


def batch_rng(seed: int, epoch: int, batch: int, rank: int) -> np.random.Generator:
    """The generator that draws batch `batch`'s crops and flips: every backend uses this one,
    so they draw the same boxes, and a batch can be recomputed alone."""
    return np.random.default_rng([seed, epoch, batch, rank])


def output_size(transforms: Sequence[Transform], shapes: np.ndarray) -> tuple[int, int]:
    """The one (height, width) the transforms give over all `shapes`, or a clear error."""
    unique = np.unique(np.asarray(shapes, dtype=np.int64).reshape(-1, 2), axis=0)
    empty = [np.zeros((0, 4))] * len(unique)  # the size never depends on the boxes
    return plan_geometry(transforms, unique, np.random.default_rng(0), empty).size
