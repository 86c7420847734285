"""The packed path's batch_transform=: a user's callable on each decoded uint8 batch.

It runs on the producer thread, after decode and before normalize. On the CPU target the
decoder writes the batch channel-first as uint8 (fused, on its own threads) for the transform,
and the decoder's threads then fill the normalized output from the result (normalize_planar);
on CUDA the transform sees the ring slot and normalize runs on the device as usual.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fastloader.errors import FastloaderError, invalid_argument
from fastloader.gpu.planar import PlanarSpec


def check_batch_transform(transform: Any) -> Any:
    """None, or a callable (refused with the way to fix it otherwise)."""
    if transform is not None and not callable(transform):
        raise invalid_argument("batch_transform", transform, "must be callable",
                               "Pass a function of a uint8 NCHW batch tensor.")
    return transform


def run_batch_transform(transform: Any, images: torch.Tensor) -> torch.Tensor:
    """transform(images), checked: a torch.uint8 tensor of the same shape."""
    result = transform(images)
    if not isinstance(result, torch.Tensor) or result.shape != images.shape or (
            result.dtype != torch.uint8):
        got = (f"{type(result).__name__}" if not isinstance(result, torch.Tensor)
               else f"a {result.dtype} tensor of shape {tuple(result.shape)}")
        raise FastloaderError(
            f"batch_transform returned {got}; it must return a torch.uint8 tensor of the "
            f"shape it was given, {tuple(images.shape)} (N, C, H, W). Convert to float in "
            "normalize= or gpu_transforms, not in batch_transform.")
    return result


def transform_slot(transform: Any, out: np.ndarray) -> None:
    """Run the transform on the NCHW view of a ring slot (NHWC uint8), in place."""
    view = torch.from_numpy(out).permute(0, 3, 1, 2)
    result = run_batch_transform(transform, view)
    if result is not view:
        view.copy_(result)


def transform_planar(transform: Any, staged: torch.Tensor, images: torch.Tensor,
                     spec: PlanarSpec, decoder: Any) -> torch.Tensor:
    """Run the transform on the uint8 channel-first batch `staged`; return the output tensor:
    the result itself for uint8 output, else `images` filled with result * scale + shift by
    the decoder's threads (BatchDecoder.normalize_planar: the fused path's arithmetic, so a
    transform that changes nothing gives the same bits as no transform)."""
    result = run_batch_transform(transform, staged)
    if not images.is_floating_point():
        return result
    decoder.normalize_planar(result.contiguous(), images, scale=spec.scale, shift=spec.shift)
    return images
