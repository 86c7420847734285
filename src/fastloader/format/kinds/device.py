"""A batch's values moved to the device: numeric columns as one tensor, per-sample arrays
(boxes, variable-length ndarray fields) in one copy: B small synchronous copies would each wait
for the device. torch is imported when a batch is built, not with the format stage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def to_tensor(values: np.ndarray | Sequence[float], device: torch.device) -> torch.Tensor:
    """A batch of fixed-shape values ([B, ...] array or list of scalars) as one tensor."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(values)).to(device)


def arrays_to_device(arrays: Sequence[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Each array as a tensor on device, with its own shape and dtype (all share one dtype).

    On the CPU each is wrapped, copied only when read-only (a memory-mapped column's slice:
    torch wants writable memory). Elsewhere the batch is flattened into one host
    tensor (page-locked for CUDA), copied once (non_blocking on CUDA: torch's pinned allocator
    keeps that host block until the copy has run) and split into per-sample views.
    """
    import torch

    if device.type == "cpu":
        return [torch.from_numpy(np.require(a, requirements="W")) for a in arrays]
    if not arrays:
        return []
    return _one_copy(arrays, device)


def _one_copy(arrays: Sequence[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    import torch

    dtype = np.asarray(arrays[0]).dtype
    flat = torch.from_numpy(np.concatenate([np.asarray(a, dtype).reshape(-1) for a in arrays]))
    if device.type == "cuda":
        flat = flat.pin_memory()
    moved = flat.to(device, non_blocking=device.type == "cuda")
    parts = torch.split(moved, [int(np.size(a)) for a in arrays])
    return [part.view(np.shape(a)) for part, a in zip(parts, arrays, strict=True)]
