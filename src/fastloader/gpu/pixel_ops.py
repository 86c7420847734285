"""Batched pixel-value ops on NCHW tensors: colour jitter, MixUp and CutMix (GpuTransforms)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch

from fastloader.errors import invalid_argument, invalid_type
from fastloader.gpu.tensors import (
    as_working_float,
    back_to_dtype,
    check_images,
    check_labels,
    host_tensor,
    value_bound,
)

# ITU-R 601 luma weights, as torchvision's rgb_to_grayscale uses.
_LUMA = (0.2989, 0.587, 0.114)


@functools.lru_cache(maxsize=16)
def _luma_weights(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    # Cached per device: a torch.tensor() copy to the GPU per call would wait for the stream.
    return torch.tensor(_LUMA, dtype=dtype).view(1, 3, 1, 1).to(device, non_blocking=True)


def grayscale(images: torch.Tensor) -> torch.Tensor:
    """Luma of an (N, 3, H, W) float batch as (N, 1, H, W)."""
    return (images * _luma_weights(images.device, images.dtype)).sum(dim=1, keepdim=True)


def _jitter_range(name: str, value: object) -> tuple[float, float] | None:
    """torchvision's rule: v -> [max(0, 1 - v), 1 + v]; a (lo, hi) pair is taken as is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise invalid_argument(name, value, "must be >= 0", f"Pass {name}=0 to disable it.")
        return None if value == 0 else (max(0.0, 1.0 - value), 1.0 + value)
    if isinstance(value, Sequence) and len(value) == 2:
        low, high = float(value[0]), float(value[1])
        if not 0 <= low <= high:
            raise invalid_argument(name, value, "needs 0 <= low <= high", "Pass e.g. (0.6, 1.4).")
        return low, high
    raise invalid_type(name, value, "a non-negative float or a (low, high) pair")


class GpuColorJitter:
    """Per-sample brightness, contrast and saturation factors, applied in that fixed order.

    Same blends as torchvision's ColorJitter (hue is not supported); the order is fixed, not
    shuffled per image, so the whole batch takes three vectorised blends. uint8 batches are
    processed in float and rounded once at the end.

    Calling it as op(images, labels, rng) returns the new (images, labels): images a uint8 or
    float NCHW tensor on any device, labels a (N,) int64 tensor (or soft targets), rng the
    batch's numpy Generator (fastloader.gpu.ops.gpu_rng).

    Args:
        brightness: a factor range: x gives [max(0, 1 - x), 1 + x]; a pair is (low, high).
        contrast: as brightness.
        saturation: as brightness.

    Raises:
        InvalidArgumentError: a negative amount or an empty range.
        InvalidTypeError: an amount is not a number or a pair of numbers.
    """

    def __init__(
        self,
        brightness: float | tuple[float, float] = 0.0,
        contrast: float | tuple[float, float] = 0.0,
        saturation: float | tuple[float, float] = 0.0,
    ) -> None:
        self.brightness = _jitter_range("brightness", brightness)
        self.contrast = _jitter_range("contrast", contrast)
        self.saturation = _jitter_range("saturation", saturation)

    def factors(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """(3, count) factors for brightness, contrast, saturation (1 where disabled)."""
        out = np.ones((3, count), np.float64)
        for row, bounds in enumerate((self.brightness, self.contrast, self.saturation)):
            if bounds is not None:
                out[row] = rng.uniform(bounds[0], bounds[1], count)
        return out

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images, channels=3)
        factors = self.factors(rng, images.shape[0])
        bound = value_bound(images.dtype)
        work = as_working_float(images)
        per_sample = host_tensor(factors, work, work.dtype).view(3, -1, 1, 1, 1)
        if self.brightness is not None:
            work = (work * per_sample[0]).clamp_(0, bound)
        if self.contrast is not None:
            mean = grayscale(work).mean(dim=(1, 2, 3), keepdim=True)
            work = torch.lerp(mean.expand_as(work), work, per_sample[1]).clamp_(0, bound)
        if self.saturation is not None:
            work = torch.lerp(grayscale(work).expand_as(work), work, per_sample[2])
            work = work.clamp_(0, bound)
        return back_to_dtype(work, images.dtype), labels

    def __repr__(self) -> str:
        return (
            f"GpuColorJitter(brightness={self.brightness}, contrast={self.contrast}, "
            f"saturation={self.saturation})"
        )


def soft_targets(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Class indices -> one-hot float rows; soft-target rows pass through as float."""
    if labels.dim() == 2:
        if labels.shape[1] != num_classes:
            raise invalid_argument(
                "labels.shape[1]", labels.shape[1], f"must equal num_classes={num_classes}",
                "Pass soft targets with one column per class.",
            )
        return labels.float()
    if labels.dtype.is_floating_point:
        raise invalid_argument("labels.dtype", labels.dtype, "class indices must be integers",
                               "Pass int64 labels.")
    if labels.device.type == "cpu":
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= num_classes:
            raise invalid_argument(
                "labels", (low, high), f"must lie in [0, {num_classes})",
                "Pass num_classes larger than the largest label.",
            )
    else:
        # Reading min/max back would be two blocking device-to-host syncs per batch: the
        # check runs on the device and fails at a later kernel launch instead. (The packed
        # and DALI loaders' labels come from the dataset's index, in range by construction.)
        in_range = ((labels >= 0) & (labels < num_classes)).all()
        torch._assert_async(in_range, f"labels must lie in [0, {num_classes})")
    rows = torch.zeros((labels.shape[0], num_classes), dtype=torch.float32, device=labels.device)
    return rows.scatter_(1, labels.long().clamp(0, num_classes - 1).view(-1, 1), 1.0)


class _BatchMix:
    """Shared argument checks and label mixing of MixUp and CutMix (partner = batch.roll(1))."""

    def __init__(self, alpha: float, num_classes: int) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
            raise invalid_argument("alpha", alpha, "must be a float > 0",
                                   "Pass e.g. alpha=0.2 (MixUp) or alpha=1.0 (CutMix).")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise invalid_argument("num_classes", num_classes, "must be an int >= 1",
                                   "Pass the number of classes of the dataset.")
        self.alpha = float(alpha)
        self.num_classes = num_classes

    def mixed_targets(self, labels: torch.Tensor, lam: float) -> torch.Tensor:
        targets = soft_targets(labels, self.num_classes)
        return targets * lam + targets.roll(1, 0) * (1.0 - lam)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes})"


class GpuMixUp(_BatchMix):
    """MixUp: each image blends with the previous one in the batch by lam ~ Beta(alpha, alpha).

    Labels become soft targets (N, num_classes) float, mixed by the same lam.

    Calling it as op(images, labels, rng) returns the new (images, labels): images a uint8 or
    float NCHW tensor on any device, labels a (N,) int64 tensor (or soft targets), rng the
    batch's numpy Generator (fastloader.gpu.ops.gpu_rng).

    Args:
        alpha: the Beta distribution's parameter, > 0.
        num_classes: classes of the soft targets, >= 1.

    Raises:
        InvalidArgumentError: alpha <= 0 or num_classes < 1 (and, when called, labels outside
            0..num_classes-1).
    """

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        check_labels(labels, images.shape[0])
        lam = float(rng.beta(self.alpha, self.alpha))
        work = as_working_float(images)
        mixed = torch.lerp(work.roll(1, 0), work, lam)
        return back_to_dtype(mixed, images.dtype), self.mixed_targets(labels, lam)


class GpuCutMix(_BatchMix):
    """CutMix: one box (torchvision v2's rule) of each image comes from the previous image.

    lam is corrected to the pasted area, and labels become soft targets mixed by it.

    Calling it as op(images, labels, rng) returns the new (images, labels): images a uint8 or
    float NCHW tensor on any device, labels a (N,) int64 tensor (or soft targets), rng the
    batch's numpy Generator (fastloader.gpu.ops.gpu_rng).

    Args:
        alpha: the Beta distribution's parameter, > 0.
        num_classes: classes of the soft targets, >= 1.

    Raises:
        InvalidArgumentError: alpha <= 0 or num_classes < 1 (and, when called, labels outside
            0..num_classes-1).
    """

    def box(self, rng: np.random.Generator, height: int, width: int) -> tuple[int, int, int, int]:
        """Draw lam and return the pasted box (y1, y2, x1, x2)."""
        lam = float(rng.beta(self.alpha, self.alpha))
        centre_y, centre_x = int(rng.integers(0, height)), int(rng.integers(0, width))
        half = 0.5 * np.sqrt(1.0 - lam)
        half_h, half_w = int(half * height), int(half * width)
        return (
            max(centre_y - half_h, 0), min(centre_y + half_h, height),
            max(centre_x - half_w, 0), min(centre_x + half_w, width),
        )

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        check_labels(labels, images.shape[0])
        height, width = images.shape[2], images.shape[3]
        y1, y2, x1, x2 = self.box(rng, height, width)
        out = images.clone()
        out[:, :, y1:y2, x1:x2] = images.roll(1, 0)[:, :, y1:y2, x1:x2]
        lam = 1.0 - (y2 - y1) * (x2 - x1) / float(height * width)
        return out, self.mixed_targets(labels, lam)
