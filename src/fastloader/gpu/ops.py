"""Batched augmentation ops on NCHW image tensors on any torch device (one launch per op per batch).

Every op follows the `GpuTransform` protocol: ``op(images, labels, rng) -> (images, labels)``.
Random parameters are drawn on the host from a numpy Generator (seeded by ``gpu_rng(seed,
epoch, batch_index)``) and then moved to the images' device, so the parameters, and hence the
results, do not depend on the device or on how many threads produced the batch. Images may be
uint8 (values 0..255; results are rounded back to uint8) or floating point (values 0..1, the
torchvision convention; results stay floating).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fastloader.errors import invalid_argument, invalid_type
from fastloader.gpu.resample import antialiased_crop
from fastloader.gpu.tensors import (
    GpuTransform,
    as_working_float,
    back_to_dtype,
    check_images,
    check_probability,
    gpu_rng,
    host_tensor,
)


def crop_thetas(
    boxes: np.ndarray, flips: np.ndarray, height: int, width: int
) -> np.ndarray:
    """Affine matrices (N, 2, 3) mapping output coords in [-1, 1] to each box (top, left, h, w).

    With align_corners=False, output pixel centre j samples input x = left + (j + 0.5) * w / out_w
    - 0.5: the same source coordinates as cropping the box and resizing it bilinearly. A flip
    negates the x scale, so crop, resize and flip take a single grid_sample.
    """
    top, left, box_h, box_w = (boxes[:, k].astype(np.float64) for k in range(4))
    thetas = np.zeros((len(boxes), 2, 3), np.float64)
    thetas[:, 0, 0] = np.where(flips, -box_w / width, box_w / width)
    thetas[:, 0, 2] = (2 * left + box_w) / width - 1
    thetas[:, 1, 1] = box_h / height
    thetas[:, 1, 2] = (2 * top + box_h) / height - 1
    return thetas


def resized_crop(
    images: torch.Tensor,
    boxes: np.ndarray,
    size: tuple[int, int],
    flips: np.ndarray | None = None,
    mode: str = "bilinear",
    antialias: bool = False,
) -> torch.Tensor:
    """Crop box k (top, left, h, w) of image k, resize it to `size` and optionally flip it.

    antialias=False: one affine_grid + grid_sample for the whole batch; samples outside the
    image take the nearest border pixel; strong downscales alias. antialias=True (bilinear
    only): the decode path's resize, Pillow's triangle filter widened by the downscale factor
    over the box alone, as two batched matmuls with per-sample weight matrices.
    Both sample in float32 (float64 images in float64) whatever the image dtype (bf16 cannot
    even hold the grid: 499 rounds to 500) and cast once at the end.
    """
    check_images(images)
    boxes = np.asarray(boxes)
    if boxes.shape != (images.shape[0], 4):
        raise invalid_argument(
            "boxes.shape", boxes.shape, f"must be ({images.shape[0]}, 4) rows of (top, left, h, w)",
            "Pass one crop box per image.",
        )
    flips = np.zeros(len(boxes), bool) if flips is None else np.asarray(flips, bool)
    work = as_working_float(images)  # float32 (float64 stays), never half precision
    if antialias and mode == "bilinear":
        out = antialiased_crop(work, boxes, size, flips)
    else:
        height, width = images.shape[2], images.shape[3]
        theta = host_tensor(crop_thetas(boxes, flips, height, width), work, work.dtype)
        grid = F.affine_grid(theta, [images.shape[0], images.shape[1], *size],
                             align_corners=False)
        out = F.grid_sample(work, grid, mode=mode, padding_mode="border", align_corners=False)
    return back_to_dtype(out, images.dtype)


class GpuGeometry:
    """Decode-time transforms (fastloader.decode.augment) applied to an already-decoded batch.

    Boxes and flips come from fastloader.decode.augment.plan, the very planner the decode path
    uses, treating every image as height x width. Bilinear with antialias (the default) resizes
    like the decode path (Pillow's filter, antialiased on downscale); antialias=False or another
    mode takes one grid_sample, which aliases on strong downscales.
    """

    def __init__(self, transforms: Sequence[object], mode: str = "bilinear",
                 antialias: bool = True) -> None:
        from fastloader.decode.augment import check_transforms, refuse_detection

        self.transforms = check_transforms(list(transforms))
        refuse_detection(self.transforms, "the device ops", "Pass ResizeFit and RandomIoUCrop "
                         "in the loader's transforms=, which decode them fused on the CPU.")
        if mode not in ("bilinear", "nearest", "bicubic"):
            raise invalid_argument(
                "mode", mode, "must be 'bilinear', 'nearest' or 'bicubic'", "Pick one of those."
            )
        self.mode = mode
        if not isinstance(antialias, bool):
            raise invalid_type("antialias", antialias, "a bool")
        self.antialias = antialias

    def plan(
        self, rng: np.random.Generator, count: int, height: int, width: int
    ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """Boxes (count, 4) as (top, left, h, w), flips (count,) and the output (h, w)."""
        from fastloader.decode.augment import plan

        return plan(self.transforms, np.tile([height, width], (count, 1)), rng)

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        boxes, flips, size = self.plan(rng, images.shape[0], images.shape[2], images.shape[3])
        if images.shape[0] == 0:
            return images, labels
        return resized_crop(images, boxes, size, flips, mode=self.mode,
                            antialias=self.antialias), labels

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.transforms)!r})"


class GpuRandomResizedCrop(GpuGeometry):
    """torchvision's RandomResizedCrop on a batch on the device, boxes drawn by the CPU planner.

    Calling it as op(images, labels, rng) returns the new (images, labels): images a uint8 or
    float NCHW tensor on any device, labels a (N,) int64 tensor (or soft targets), rng the
    batch's numpy Generator (fastloader.gpu.ops.gpu_rng).

    Args:
        size: output size, an int (square) or (height, width).
        scale: range of the box's area as a fraction of the image, within (0, 1].
        ratio: range of the box's aspect ratio (width / height).
        mode: grid_sample interpolation, "bilinear", "nearest" or "bicubic".

    Raises:
        InvalidArgumentError: a bad size, range or mode (and, when called, a bad batch).
        InvalidTypeError: size is not an int or a pair of ints.
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        mode: str = "bilinear",
        antialias: bool = True,
    ) -> None:
        from fastloader.decode.augment import RandomResizedCrop

        super().__init__([RandomResizedCrop(size, scale=scale, ratio=ratio)], mode=mode,
                         antialias=antialias)


class GpuRandomHorizontalFlip:
    """Flip each image left-right with probability p (a per-sample mask, one torch.where).

    Calling it as op(images, labels, rng) returns the new (images, labels): images a uint8 or
    float NCHW tensor on any device, labels a (N,) int64 tensor (or soft targets), rng the
    batch's numpy Generator (fastloader.gpu.ops.gpu_rng).

    Args:
        p: the probability of a flip, in [0, 1].

    Raises:
        InvalidArgumentError: p is outside [0, 1].
        InvalidTypeError: p is not a number.
    """

    def __init__(self, p: float = 0.5) -> None:
        self.p = check_probability("p", p)

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        mask = host_tensor(rng.random(images.shape[0]) < self.p, images, torch.bool)
        return torch.where(mask.view(-1, 1, 1, 1), images.flip(-1), images), labels

    def __repr__(self) -> str:
        return f"GpuRandomHorizontalFlip(p={self.p})"


class GpuNormalize:
    """(x / 255 - mean) / std per channel, to dtype; uint8 input is scaled by 1/255 first,
    floating input is taken as already on the 0..1 scale.

    Calling it as op(images, labels, rng) returns the new (images, labels): images a uint8 or
    float NCHW tensor on any device, labels a (N,) int64 tensor (or soft targets), rng the
    batch's numpy Generator (fastloader.gpu.ops.gpu_rng).

    Args:
        mean: 3 channel means on the 0..1 scale.
        std: 3 positive channel standard deviations on the 0..1 scale.
        dtype: the floating output dtype (float32, float16, bfloat16 or float64).

    Raises:
        InvalidArgumentError: not 3 values, a std <= 0, or a non-floating dtype.
        InvalidTypeError: mean or std is not a sequence of numbers.
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.mean = _check_channel_values("mean", mean, positive=False)
        self.std = _check_channel_values("std", std, positive=True)
        if len(self.mean) != len(self.std):
            raise invalid_argument(
                "std", std, f"must have as many values as mean ({len(self.mean)})",
                "Pass one mean and one std per channel.",
            )
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise invalid_argument("dtype", dtype, "must be a floating torch dtype",
                                   "Pass e.g. torch.float32 or torch.float16.")
        self.dtype = dtype
        # (device, input scale) -> (shift, multiplier): built once per device, because a
        # host-to-device torch.tensor() per batch would wait for the whole stream each time.
        self._constants: dict[tuple[torch.device, float], tuple[torch.Tensor, torch.Tensor]] = {}

    def _on(self, device: torch.device, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        key = (device, scale)
        if key not in self._constants:
            mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
            inv_std = 1.0 / torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
            # Computed on the host, moved without a blocking copy (torch.tensor(device=cuda)
            # is one, which sync debug mode reports).
            self._constants[key] = (
                (-mean * inv_std).to(device, non_blocking=True),
                (scale * inv_std).to(device, non_blocking=True))
        return self._constants[key]

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images, channels=len(self.mean))
        scale = 1.0 / 255.0 if images.dtype == torch.uint8 else 1.0
        shift, multiplier = self._on(images.device, scale)
        # One fused multiply-add, x * (scale / std) - mean / std: read in the input dtype,
        # computed in float32, written once in self.dtype (no float32 batch in between).
        out = torch.empty_like(images, dtype=self.dtype)
        return torch.addcmul(shift, images, multiplier, out=out), labels

    def __repr__(self) -> str:
        return f"GpuNormalize(mean={self.mean}, std={self.std}, dtype={self.dtype})"


def _check_channel_values(name: str, values: object, positive: bool) -> tuple[float, ...]:
    if not isinstance(values, Sequence) or isinstance(values, str) or len(values) == 0:
        raise invalid_type(name, values, "a sequence of floats, one per channel")
    out = tuple(float(v) for v in values)
    if positive and any(v <= 0 for v in out):
        raise invalid_argument(name, values, "every value must be > 0", "Pass positive stds.")
    return out


class GpuCompose:
    """Run GpuTransforms in order on one batch; itself a GpuTransform.

    Calling it as op(images, labels, rng) returns the new (images, labels): images a uint8 or
    float NCHW tensor on any device, labels a (N,) int64 tensor (or soft targets), rng the
    batch's numpy Generator (fastloader.gpu.ops.gpu_rng).

    Args:
        transforms: the ops, each a callable (images, labels, rng) -> (images, labels).

    Raises:
        InvalidTypeError: transforms is not a sequence of such callables.
    """

    def __init__(self, transforms: Sequence[GpuTransform]) -> None:
        if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Sequence):
            raise invalid_type("gpu_transforms", transforms, "a list of GpuTransform callables")
        for k, op in enumerate(transforms):
            if not callable(op):
                raise invalid_type(f"gpu_transforms[{k}]", op, "a GpuTransform callable")
        self.transforms = list(transforms)

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for op in self.transforms:
            images, labels = op(images, labels, rng)
        return images, labels

    def __repr__(self) -> str:
        return f"GpuCompose({self.transforms!r})"


class GpuLayout:
    """Make the batch `memory_format` (e.g. torch.channels_last); a no-op when it already is."""

    def __init__(self, memory_format: torch.memory_format) -> None:
        self.memory_format = memory_format

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return images.contiguous(memory_format=self.memory_format), labels

    def __repr__(self) -> str:
        return f"GpuLayout({self.memory_format})"


def device_ops(
    gpu_transforms: Sequence[GpuTransform] | None,
    constants: tuple[np.ndarray, np.ndarray] | None,
    dtype: torch.dtype,
    memory_format: torch.memory_format | None = None,
) -> GpuCompose | None:
    """What a loader runs on the device after the copy: the gpu_transforms, then normalize.

    The ops see uint8 pixels, not normalized values, so normalize (mean, std in the 0-255
    scale, as device.normalize_constants gives them) is appended last, writing `dtype`
    directly, then the layout when channels_last is asked. None without ops: the loader's
    own copy step normalizes (and lays out) then.
    """
    if not gpu_transforms:
        return None
    return GpuCompose([*GpuCompose(gpu_transforms).transforms,
                       *output_ops(constants, dtype, memory_format)])


def output_ops(constants: tuple[np.ndarray, np.ndarray] | None, dtype: torch.dtype,
               memory_format: torch.memory_format | None) -> list[GpuTransform]:
    """The end of a device pipeline: normalize (mean, std in the 0-255 scale) writing dtype,
    when there are constants, then the layout when channels_last is asked."""
    ops: list[GpuTransform] = []
    if constants is not None:
        mean, std = constants
        ops.append(GpuNormalize(tuple(mean / 255.0), tuple(std / 255.0), dtype=dtype))
    if memory_format is not None and memory_format != torch.contiguous_format:
        ops.append(GpuLayout(memory_format))
    return ops


def apply_gpu_transforms(
    transforms: Sequence[GpuTransform],
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    seed: int,
    epoch: int,
    batch_index: int,
    rank: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply `transforms` to one batch with the generator of (seed, epoch, batch_index, rank)."""
    return GpuCompose(transforms)(images, labels, gpu_rng(seed, epoch, batch_index, rank))
