"""`fastloader.View` and the pixel ops of `transforms=`: the transforms split into the geometric
ones (planned as crop boxes, decode/augment.py) and the pixel ops (decode/pixels: drawn as a
program per sample), the views checked, and where the pixel ops run (`pixel_ops_on`).

A View is one crop of every sample with its own transforms; `count` repeats it with new draws
(DINO's 2 global and 8 local crops: View([...224...], count=2), View([...96...], count=8)).
The packed loader decodes each record once for all its views (loader/images/views.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from fastloader.checks import positive_int
from fastloader.decode.augment import (
    RandomHorizontalFlip,
    Resize,
    Transform,
    check_transforms,
)
from fastloader.decode.detect import RandomIoUCrop, ResizeFit
from fastloader.decode.pixels import PixelTransform, check_pixel_transforms, is_pixel_transform
from fastloader.errors import invalid_argument, invalid_type
from fastloader.gpu.ops import GpuCompose, output_ops

PIXEL_OPS_ON = ("auto", "cpu", "device")
MAX_VIEWS = 64  # views a sample; far above any recipe (DINO takes 10), each a ring region
PixelOpsOn = Literal["auto", "cpu", "device"]


def _sized(op: object) -> bool:
    """A geometric transform that sets the output's size (every one but the flip)."""
    return not isinstance(op, RandomHorizontalFlip)


def split_transforms(transforms: object, argument: str = "transforms"
                     ) -> tuple[tuple[Transform, ...], tuple[PixelTransform, ...]]:
    """(geometric, pixel ops) of a transform or a list of them, each checked.

    The pixel ops run on each sample's output pixels, after its crop and resize; one placed
    before a crop or resize is refused (it would run after it here, silently reordered).
    """
    if transforms is None:
        return (), ()
    items = list(transforms) if isinstance(transforms, (list, tuple)) else [transforms]
    geometric: list[Any] = []
    places: list[int] = []  # the geometric transforms' places in items, for their errors
    pixel: list[Any] = []
    for k, item in enumerate(items):
        if is_pixel_transform(item):
            pixel.append(item)
            continue
        if pixel and _sized(item):
            raise invalid_argument(
                f"{argument}[{k}]", item, f"a crop or resize follows the pixel op {pixel[-1]!r}, "
                "and pixel ops run on each sample's output pixels, after every crop and resize",
                "Put the pixel ops after the crops and resizes, as torchvision's recipes do: "
                "[RandomResizedCrop(224), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.2, "
                "0.1)].")
        check_transforms([*geometric, item], argument, [*places, k])
        geometric.append(item)
        places.append(k)
    return tuple(geometric), check_pixel_transforms(pixel)


def refuse_pixel_ops(transforms: object, where: str, fix: str) -> None:
    """Raise naming the first pixel op of `transforms` given to a path that cannot run it."""
    items = list(transforms) if isinstance(transforms, (list, tuple)) else [transforms]
    for k, op in enumerate(items):
        if is_pixel_transform(op):
            raise invalid_argument(f"transforms[{k}]", op, f"{type(op).__name__} is a pixel "
                                   f"op, which {where} does not run", fix)


@dataclass(frozen=True)
class View:
    """One view of every sample: its own crop, resize, flip and pixel ops, `count` times.

    `FastLoader(path, views=[View(...), View(..., count=8)])` yields each batch's views as a
    list of image batches, in order, each view repeated `count` times with its own draws, in
    the images' place (docs/views.md). Every view of a sample comes from one decode of its
    record.

    Args:
        transforms: the view's transforms: a crop or resize that fixes its output size
            (RandomResizedCrop, CenterCrop, Resize((h, w)); RandomIoUCrop before one),
            RandomHorizontalFlip, and pixel ops (fastloader.ColorJitter, RandomGrayscale,
            GaussianBlur, RandomSolarize, ...) after them.
        count: how many views of these transforms, each drawn anew (>= 1).

    Raises:
        InvalidArgumentError: no crop or resize fixes the size, ResizeFit (a letterbox) is
            given, a pixel op precedes a crop, count < 1 or an op is not a transform.
        InvalidTypeError: transforms is not a list of transforms, or count not an int.
    """

    transforms: Sequence[Any]
    count: int = 1
    geometric: tuple[Transform, ...] = field(init=False, repr=False, compare=False)
    pixel_ops: tuple[PixelTransform, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.transforms, (str, bytes)) or not isinstance(
                self.transforms, (list, tuple)):
            raise invalid_type("View.transforms", self.transforms, "a list of transforms, "
                               "e.g. [RandomResizedCrop(224), RandomHorizontalFlip()]")
        object.__setattr__(self, "transforms", tuple(self.transforms))
        count = positive_int("View.count", self.count)
        if count > MAX_VIEWS:
            raise invalid_argument("View.count", count, f"must be at most {MAX_VIEWS}",
                                   "Pass the views a recipe takes (DINO: 2 and 8).")
        object.__setattr__(self, "count", count)
        geometric, pixel = split_transforms(self.transforms, "View.transforms")
        for k, op in enumerate(self.transforms):
            if isinstance(op, ResizeFit):
                raise invalid_argument(
                    f"View.transforms[{k}]", op, "a view cannot letterbox (ResizeFit pads "
                    "each image into its canvas, and views are crops)", "Use ResizeFit in "
                    "transforms= without views, or Resize((h, w)) in the view.")
        sized = [op for op in geometric if _sized(op)]
        last = sized[-1] if sized else None
        if last is None or isinstance(last, RandomIoUCrop) or (
                isinstance(last, Resize) and not isinstance(last.size, (tuple, list))):
            raise invalid_argument(
                "View.transforms", list(self.transforms), "a view needs a crop or resize that "
                "fixes its output size (RandomResizedCrop, CenterCrop or Resize((h, w)), last "
                "of its crops and resizes)", "Add one, e.g. View([RandomResizedCrop(96, "
                "scale=(0.05, 0.4)), RandomHorizontalFlip()], count=8).")
        object.__setattr__(self, "geometric", geometric)
        object.__setattr__(self, "pixel_ops", pixel)


def expand_views(views: object) -> tuple[View, ...]:
    """views= checked: a non-empty list of View, each repeated `count` times, in order."""
    if isinstance(views, View):
        views = [views]
    if isinstance(views, (str, bytes)) or not isinstance(views, Sequence) or not views:
        raise invalid_type("views", views, "a non-empty list of fastloader.View")
    expanded: list[View] = []
    for k, view in enumerate(views):
        if not isinstance(view, View):
            raise invalid_type(f"views[{k}]", view, "a fastloader.View(transforms, count=1)")
        expanded.extend([view] * view.count)
    if len(expanded) > MAX_VIEWS:
        raise invalid_argument("views", list(views), f"gives {len(expanded)} views a sample, "
                               f"more than {MAX_VIEWS}", "Pass fewer views or lower counts.")
    return tuple(expanded)


def pixels_on_device(pixel_ops_on: object, device: torch.device) -> bool:
    """Whether the pixel ops run on the device after the copy (else fused in the decode):
    "auto" runs them on any non-CPU device, "cpu" in the decode, "device" after the copy
    (on the CPU target too: the batched torch ops of gpu/pixel_program.py)."""
    if pixel_ops_on not in PIXEL_OPS_ON:
        raise invalid_argument("pixel_ops_on", pixel_ops_on, f"must be one of {PIXEL_OPS_ON}",
                               "Pass 'auto' (the device's batched ops with CUDA, else fused "
                               "in the decode), 'cpu' or 'device'.")
    if pixel_ops_on == "auto":
        return device.type != "cpu"
    return pixel_ops_on == "device"


def after_pixels(gpu_transforms: Any, constants: Any, dtype: torch.dtype,
                 memory_format: torch.memory_format) -> GpuCompose:
    """What runs on the device after the pixel program there: the gpu_transforms (MixUp,
    CutMix), then normalize into dtype (a float dtype without normalize: x / 255, as ToTensor;
    uint8 kept as it is), then the layout. The copy step then only moves uint8 pixels."""
    if constants is None and dtype != torch.uint8:  # x / 255: mean 0, std 255 in 0-255 terms
        constants = (np.zeros(3), np.full(3, 255.0))
    head: list[Any] = list(GpuCompose(gpu_transforms).transforms) if gpu_transforms else []
    return GpuCompose([*head, *output_ops(constants, dtype, memory_format)])


def _refuse_with_views(options: Any) -> None:
    """What views= cannot be given with: each refused naming the argument and the fix."""
    if options.transforms not in (None, [], ()):
        raise invalid_argument("transforms", options.transforms, "views= gives every view its "
                               "own transforms", "Pass the transforms inside each "
                               "fastloader.View, and drop transforms=.")
    if options.gpu_transforms:
        raise invalid_argument("gpu_transforms", options.gpu_transforms, "does not run on "
                               "views (a batch mix would have to pair the views' labels)",
                               "Drop gpu_transforms=, or load one view with transforms=.")
    if options.batch_transform is not None:
        raise invalid_argument("batch_transform", options.batch_transform, "takes one image "
                               "batch, and views= yields several", "Drop batch_transform=, "
                               "or apply it to each view's batch in the training loop.")


@dataclass(frozen=True)
class ViewPlan:
    """What views= and pixel_ops_on= set on the packed loader's options: the views (each
    `count` expanded), whether the pixel ops run on the device, what runs there after the copy
    (the gpu_transforms and, with the pixel ops there, normalize: the copy step then moves
    uint8 pixels, `uint8_copy`)."""

    views: tuple[View, ...]
    on_device: bool
    after_copy: GpuCompose | None
    uint8_copy: bool


def check_views(options: Any) -> ViewPlan:
    """The packed loader's views= and pixel_ops_on=, on its otherwise checked options."""
    on_device = pixels_on_device(options.pixel_ops_on, options.target)
    views = () if options.views is None else expand_views(options.views)
    if views:
        _refuse_with_views(options)
    ops = options.pixel_ops or any(view.pixel_ops for view in views)
    if not ops or not on_device:
        return ViewPlan(views, on_device, options.gpu_ops, False)
    if options.batch_transform is not None:
        raise invalid_argument(
            "batch_transform", options.batch_transform, "runs on the producer thread, before "
            "the pixel ops that run on the device", "Pass pixel_ops_on='cpu' to run the pixel "
            "ops in the decode, before batch_transform.")
    return ViewPlan(views, on_device, after_pixels(options.gpu_transforms, options.constants,
                                                   options.out_dtype, options.layout), True)
