"""What the batched ops share: the per-batch generator, batch checks and dtype helpers."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

from fastloader.errors import invalid_argument, invalid_type

# Tags the GPU ops' random stream so it never coincides with the decode-time transforms' one.
_GPU_STREAM = 0x67707530


@runtime_checkable
class GpuTransform(Protocol):
    """A batched op: takes (images NCHW, labels, rng) and returns new (images, labels)."""

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def gpu_rng(seed: int, epoch: int, batch_index: int, rank: int = 0) -> np.random.Generator:
    """The generator the GPU ops of one batch draw from: a pure function of its four seeds."""
    named = (("seed", seed), ("epoch", epoch), ("batch_index", batch_index), ("rank", rank))
    for name, value in named:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise invalid_type(name, value, "an int")
        if value < 0:
            raise invalid_argument(name, value, "must be >= 0", "Pass a non-negative int.")
    return np.random.Generator(np.random.PCG64([seed, epoch, batch_index, rank, _GPU_STREAM]))


def check_images(images: object, channels: int | None = None) -> torch.Tensor:
    """Check that `images` is an NCHW uint8 or floating tensor (with `channels` channels)."""
    if not isinstance(images, torch.Tensor):
        raise invalid_type("images", images, "a torch.Tensor of shape (N, C, H, W)")
    if images.dim() != 4:
        raise invalid_argument(
            "images.shape", tuple(images.shape), "must be 4-D (N, C, H, W)",
            "Pass a batch in NCHW layout (permute NHWC batches with .permute(0, 3, 1, 2)).",
        )
    if images.dtype != torch.uint8 and not images.dtype.is_floating_point:
        raise invalid_argument(
            "images.dtype", images.dtype, "must be torch.uint8 or a floating dtype",
            "Convert the batch with .to(torch.uint8) or .float().",
        )
    if channels is not None and images.shape[1] != channels:
        raise invalid_argument(
            "images.shape[1]", images.shape[1], f"must be {channels} channels (RGB)",
            "Pass RGB images in NCHW layout.",
        )
    return images


def check_labels(labels: object, batch: int) -> torch.Tensor:
    """Check that `labels` is a tensor with one entry (or one row) per image."""
    if not isinstance(labels, torch.Tensor):
        raise invalid_type("labels", labels, "a torch.Tensor")
    if labels.dim() not in (1, 2) or labels.shape[0] != batch:
        raise invalid_argument(
            "labels.shape", tuple(labels.shape), f"must be ({batch},) or ({batch}, classes)",
            "Pass one class index (or one soft-target row) per image.",
        )
    return labels


def as_working_float(images: torch.Tensor) -> torch.Tensor:
    """The batch as float32 (float64 stays) for arithmetic, values unchanged.

    Half-precision batches are widened too: bf16 has 8 significant bits, too few for means,
    blends and sampling grids; the result is cast back once (back_to_dtype).
    """
    return images if images.dtype == torch.float64 else images.float()


def back_to_dtype(result: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round and clamp to uint8 when the input was uint8; keep floating results as they are."""
    if dtype == torch.uint8:
        return result.round_().clamp_(0, 255).to(torch.uint8)
    return result.to(dtype)


def value_bound(dtype: torch.dtype) -> float:
    """The largest valid pixel value for a dtype: 255 for uint8, 1.0 for floating images."""
    return 255.0 if dtype == torch.uint8 else 1.0


def host_tensor(values: np.ndarray, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Move host-drawn parameters to the images' device (a tiny copy, non-blocking on CUDA)."""
    return torch.as_tensor(values).to(device=like.device, dtype=dtype, non_blocking=True)


def check_probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid_type(name, value, "a float in [0, 1]")
    if not 0.0 <= float(value) <= 1.0:
        raise invalid_argument(name, value, "must lie in [0, 1]", f"Pass {name} between 0 and 1.")
    return float(value)
