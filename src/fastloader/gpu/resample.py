"""Crop + resize + flip of a batch the way the decode path resizes: Pillow's antialiased
bilinear filter over each box, as per-sample weight matrices and two batched matmuls."""

from __future__ import annotations

import numpy as np
import torch


def resize_weights(starts: torch.Tensor, lengths: torch.Tensor, out: int, size: int,
                   flips: torch.Tensor | None = None) -> torch.Tensor:
    """(N, out, size) float32 rows of Pillow's antialiased bilinear taps along one axis.

    Output j of sample k covers input [start, start + length) (float64 tensors on the
    images' device): centre c = (j + 0.5) * length / out, support s = max(length / out, 1),
    weight of pixel x (relative to start) = max(0, 1 - |x + 0.5 - c| / s), zero outside the
    box, each row normalized to sum 1. A flipped sample takes its rows in reverse order.
    Built in float64 (a centre near 5000 has float32 steps of 5e-4 px), returned as float32.
    """
    scale = (lengths / out).view(-1, 1, 1)
    support = scale.clamp(min=1.0)
    centre = (torch.arange(out, dtype=torch.float64, device=starts.device).view(1, -1, 1)
              + 0.5) * scale
    rel = torch.arange(size, dtype=torch.float64, device=starts.device).view(1, 1, -1) \
        - starts.view(-1, 1, 1)
    weights = (1.0 - ((rel + 0.5 - centre).abs() / support)).clamp(min=0.0)
    weights = weights * ((rel >= 0) & (rel < lengths.view(-1, 1, 1)))
    weights = weights / weights.sum(dim=2, keepdim=True).clamp(min=1e-12)
    if flips is not None:
        weights = torch.where(flips.view(-1, 1, 1), weights.flip(1), weights)
    return weights.float()


def antialiased_crop(work: torch.Tensor, boxes: np.ndarray, size: tuple[int, int],
                      flips: np.ndarray) -> torch.Tensor:
    """Crop + antialiased resize + flip of a float32 batch: rows then columns, as matmuls."""
    params = torch.as_tensor(boxes.astype(np.float64)).to(work.device, non_blocking=True)
    flip_mask = torch.as_tensor(np.asarray(flips, bool)).to(work.device, non_blocking=True)
    rows = resize_weights(params[:, 0], params[:, 2], size[0], work.shape[2])
    cols = resize_weights(params[:, 1], params[:, 3], size[1], work.shape[3], flip_mask)
    # (N,C,H,W) @ (N,1,W,w) -> (N,C,H,w); (N,1,h,H) @ that -> (N,C,h,w).
    rows, cols = rows.to(work.dtype), cols.to(work.dtype)
    return rows.unsqueeze(1) @ (work @ cols.transpose(1, 2).unsqueeze(1))
