"""The batched torch kernels of the neighbourhood and geometric pixel ops: Pillow's GaussianBlur
(three extended box passes), ImageEnhance.Sharpness (SMOOTH 3x3) and Image.transform /
Image.rotate NEAREST with fill 0, each sample with its own parameters in one launch."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from fastloader.decode.pixels import codes as C
from fastloader.decode.pixels.geometry import rotate_fast_path, step_matrix
from fastloader.gpu.pixel_kernels import blend

_PASSES = 3


def box_parameters(radius: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BoxBlur.c's extended box of a Gaussian radius, in C's float32: (r, ww, fw) int64 [M]."""
    radius = radius.astype(np.float32)
    sigma2 = (radius * radius / np.float32(_PASSES)).astype(np.float32)
    big_l = np.sqrt(12.0 * sigma2.astype(np.float64) + 1.0).astype(np.float32)
    l = np.floor((big_l.astype(np.float64) - 1.0) / 2.0).astype(np.float32)  # noqa: E741
    one = np.float32(1)
    a = (np.float32(2) * l + one) * (l * (l + one) - np.float32(3) * sigma2)
    a = (a / (np.float32(6) * (sigma2 - (l + one) * (l + one)))).astype(np.float32)
    box = (l + a).astype(np.float32)
    whole = box.astype(np.int64)
    ww = (np.float32(1 << 24) / (box * np.float32(2) + one)).astype(np.uint32).astype(np.int64)
    fw = ((1 << 24) - (whole * 2 + 1) * ww) // 2
    return whole, ww, fw


def _box_pass(lines: torch.Tensor, groups: list[tuple[int, torch.Tensor]], ww: torch.Tensor,
              fw: torch.Tensor, reach: int) -> torch.Tensor:
    """One pass along the last dim of int64 [M, C, L, W] lines (edges repeated): Pillow's
    (ww * window + fw * (the two far pixels) + 2**23) >> 24. Window sums come from a running
    sum, sliced once per group: a distinct integer radius and its rows (one or two groups for
    usual sigmas)."""
    width = lines.shape[-1]
    padded = F.pad(lines.to(torch.float32), (reach, reach, 0, 0), mode="replicate")
    padded = padded.to(torch.int64)
    sums = F.pad(torch.cumsum(padded, dim=-1), (1, 0))  # sums[i] = padded[..., :i].sum()
    out = torch.empty_like(lines)
    for radius, rows in groups:
        low, high = reach - radius, reach + radius + 1
        part = sums[rows]
        window = part[..., high:high + width] - part[..., low:low + width]
        ends = padded[rows]
        far = ends[..., low - 1:low - 1 + width] + ends[..., high:high + width]
        bulk = window * ww[rows].view(-1, 1, 1, 1) + far * fw[rows].view(-1, 1, 1, 1)
        out[rows] = (bulk + (1 << 23)) >> 24
    return out


def gaussian_blur(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageFilter.GaussianBlur(radius=p0): three box passes along rows, then along columns.
    The radii are grouped on the host once, not read back from the device in every pass."""
    whole, ww, fw = box_parameters(p[:, 0].cpu().numpy())
    device = images.device
    groups = [(radius, torch.from_numpy(np.flatnonzero(whole == radius)).to(device))
              for radius in np.unique(whole).tolist()]
    weights, fractions = (torch.from_numpy(v).to(device) for v in (ww, fw))
    reach = int(whole.max()) + 1 if whole.size else 1
    lines = images.to(torch.int64)
    for transpose in (False, True):
        lines = lines.transpose(-1, -2).contiguous() if transpose else lines
        for _ in range(_PASSES):
            lines = _box_pass(lines, groups, weights, fractions, reach)
    return lines.transpose(-1, -2).to(torch.uint8).contiguous()


def sharpness(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageEnhance.Sharpness: blend with the SMOOTH-filtered image (its border kept)."""
    _, channels, height, width = images.shape
    if height < 3 or width < 3:
        return images
    kernel = torch.full((3, 3), float(np.float32(1 / 13)), dtype=torch.float32)
    kernel[1, 1] = float(np.float32(5 / 13))
    weights = kernel.to(images.device).expand(channels, 1, 3, 3)
    smooth = F.conv2d(images.to(torch.float32), weights, groups=channels) + 0.5
    smooth = smooth.clamp_(0.0, 255.0).floor_()
    degenerate = images.to(torch.float32).clone()
    degenerate[:, :, 1:-1, 1:-1] = smooth
    return blend(degenerate, images, p[:, 0])


def _fixed(value: float) -> int:
    return math.floor(value * 65536.0 + 0.5)


def _fast_rotation(turn: int, height: int, width: int) -> list[int]:
    """Image.rotate's transposes as exact 16.16 maps (x_in, y_in from x, y)."""
    one = 1 << 16
    if turn == 0:
        return [one, 0, one // 2, 0, one, one // 2]
    if turn == 180:
        return [-one, 0, (width - 1) * one, 0, -one, (height - 1) * one]
    if turn == 90:
        return [0, -one, (width - 1) * one, one, 0, 0]
    return [0, one, 0, -one, 0, (height - 1) * one]  # 270


def sampling_maps(codes: np.ndarray, p0: np.ndarray, height: int, width: int) -> np.ndarray:
    """Each sample's 16.16 fixed-point map [a0, a1, a2, a3, a4, a5] (int64 [M, 6]):
    x_in = (a2 + x*a0 + y*a1) >> 16, y_in likewise, as Geometry.c's affine_fixed samples."""
    maps = np.zeros((len(codes), 6), np.int64)
    for index, (code, value) in enumerate(zip(codes.tolist(), p0.tolist(), strict=True)):
        turn = rotate_fast_path(value, height, width) if code == C.ROTATE else -1
        if turn >= 0:
            maps[index] = _fast_rotation(turn, height, width)
            continue
        a, b, c, d, e, f = step_matrix(code, value, height, width)
        maps[index] = [_fixed(a), _fixed(b), _fixed(c + a * 0.5 + b * 0.5), _fixed(d),
                       _fixed(e), _fixed(f + d * 0.5 + e * 0.5)]
    return maps


def geometric(images: torch.Tensor, p: torch.Tensor, code: int) -> torch.Tensor:
    """SHEAR_X/Y, TRANSLATE_X/Y or ROTATE (`code`) with each sample's p0: NEAREST, fill 0."""
    m, channels, height, width = images.shape
    p0 = p[:, 0].cpu().numpy().astype(np.float64)
    maps = torch.from_numpy(sampling_maps(np.full(m, code), p0, height, width))
    maps = maps.to(images.device).view(m, 6, 1, 1)
    ys = torch.arange(height, device=images.device).view(1, height, 1)
    xs = torch.arange(width, device=images.device).view(1, 1, width)
    x_in = (maps[:, 2] + xs * maps[:, 0] + ys * maps[:, 1]) >> 16
    y_in = (maps[:, 5] + xs * maps[:, 3] + ys * maps[:, 4]) >> 16
    valid = (x_in >= 0) & (x_in < width) & (y_in >= 0) & (y_in < height)
    flat = (y_in.clamp(0, height - 1) * width + x_in.clamp(0, width - 1)).view(m, 1, -1)
    taken = torch.gather(images.flatten(2), 2, flat.expand(m, channels, -1))
    return torch.where(valid.view(m, 1, height, width), taken.view_as(images),
                       torch.zeros_like(images))
