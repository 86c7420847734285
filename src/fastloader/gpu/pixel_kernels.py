"""The batched torch kernels of the pixel ops: colour, tables and histograms (pixel_program.py
dispatches; pixel_spatial.py has blur, sharpness and geometry).

Each takes the uint8 [M, 3, H, W] samples that run one op at one step, with their per-sample
parameters (float32 [M] on the device), and returns their new uint8 pixels: Pillow's definitions
(the CPU path's) computed with tensors, within a level or two of it.
"""

from __future__ import annotations

import torch


def per_sample(values: torch.Tensor) -> torch.Tensor:
    """[M] parameters as [M, 1, 1, 1], to broadcast over a sample's pixels."""
    return values.view(-1, 1, 1, 1)


def luma(images: torch.Tensor) -> torch.Tensor:
    """convert("L") of uint8 [M, 3, H, W] as int32 [M, 1, H, W] (Pillow's L24 fixed point)."""
    wide = images.to(torch.int32)
    weighted = wide[:, 0:1] * 19595 + wide[:, 1:2] * 38470 + wide[:, 2:3] * 7471 + 0x8000
    return weighted >> 16


def blend(degenerate: torch.Tensor, images: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Image.blend(degenerate, image, alpha): float32, truncated and clipped to uint8."""
    low = degenerate.to(torch.float32)
    mixed = low + per_sample(alpha) * (images.to(torch.float32) - low)
    return mixed.clamp_(0.0, 255.0).floor_().to(torch.uint8)


def brightness(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageEnhance.Brightness: blend with black."""
    return blend(torch.zeros_like(images[:, :1]), images, p[:, 0])


def contrast(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageEnhance.Contrast: blend with the grey of int(mean luma + 0.5)."""
    gray = luma(images)
    mean = gray.flatten(1).to(torch.float64).mean(dim=1)
    return blend(torch.floor(mean + 0.5).view(-1, 1, 1, 1), images, p[:, 0])


def saturation(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageEnhance.Color: blend with the image's own luma."""
    return blend(luma(images), images, p[:, 0])


def grayscale(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """convert("L") in all three bands."""
    return luma(images).to(torch.uint8).expand(-1, 3, -1, -1).contiguous()


def _rgb_to_hsv(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pillow's rgb2hsv: uint8 H, S, V planes (int32 [M, H, W]), float32 as Pillow computes."""
    rgb = images.to(torch.float32)
    r, g, b = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    maxc, minc = rgb.amax(dim=1), rgb.amin(dim=1)
    span = (maxc - minc).clamp_min(1.0)
    rc, gc, bc = (maxc - r) / span, (maxc - g) / span, (maxc - b) / span
    hue = torch.where(r == maxc, bc - gc, torch.where(g == maxc, 2.0 + rc - bc, 4.0 + gc - rc))
    hue = torch.remainder(hue.to(torch.float64) / 6.0 + 1.0, 1.0).to(torch.float32)
    grey = maxc == minc
    h = torch.where(grey, 0, (hue.to(torch.float64) * 255.0).to(torch.int32).clamp(0, 255))
    s_float = (span / maxc.clamp_min(1.0)).to(torch.float64) * 255.0
    s = torch.where(grey, 0, s_float.to(torch.int32).clamp(0, 255))
    return h, s, maxc.to(torch.int32)


def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Pillow's hsv2rgb of int32 planes: uint8 [M, 3, H, W]."""
    scaled = h.to(torch.float32).to(torch.float64) * 6.0 / 255.0
    sector = torch.floor(scaled)
    f = (scaled - sector).to(torch.float32)
    fs = (s.to(torch.float32).to(torch.float64) / 255.0).to(torch.float32)
    vf = v.to(torch.float64)
    # C's round() takes halves away from zero: floor(x + 0.5) for these non-negative values.
    p = torch.floor(vf * (1.0 - fs.to(torch.float64)) + 0.5).clamp(0, 255)
    q = torch.floor(vf * (1.0 - (fs * f).to(torch.float64)) + 0.5).clamp(0, 255)
    t = torch.floor(vf * (1.0 - fs.to(torch.float64) * (1.0 - f.to(torch.float64))) + 0.5)
    t = t.clamp(0, 255)
    vv = vf
    table = {0: (vv, t, p), 1: (q, vv, p), 2: (p, vv, t), 3: (p, q, vv), 4: (t, p, vv),
             5: (vv, p, q)}
    index = sector.to(torch.int64) % 6
    channels = []
    for band in range(3):
        out = torch.zeros_like(vf)
        for case, values in table.items():
            out = torch.where(index == case, values[band], out)
        channels.append(torch.where(s == 0, vf, out))
    return torch.stack(channels, dim=1).to(torch.uint8)


def hue(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """HSV with the hue shifted by int(factor * 255) mod 256, back to RGB (Convert.c's code)."""
    shift = torch.remainder(torch.trunc(p[:, 0].to(torch.float64) * 255.0), 256.0)
    h, s, v = _rgb_to_hsv(images)
    h = (h + shift.to(torch.int32).view(-1, 1, 1)) % 256
    return _hsv_to_rgb(h, s, v)


def solarize(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageOps.solarize: levels >= threshold inverted."""
    below = images.to(torch.float32) < per_sample(p[:, 0])
    return torch.where(below, images, 255 - images)


def posterize(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageOps.posterize: the top `bits` bits kept."""
    bits = p[:, 0].to(torch.int32).clamp(0, 8)
    mask = (255 - ((1 << (8 - bits)) - 1)).to(torch.uint8)
    return images & per_sample(mask)


def invert(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageOps.invert."""
    return 255 - images


def autocontrast(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageOps.autocontrast: each band from its lowest to its highest level (float64 as Python)."""
    flat = images.flatten(2)
    lo = flat.amin(dim=2).to(torch.float64)[..., None, None]
    hi = flat.amax(dim=2).to(torch.float64)[..., None, None]
    scale = 255.0 / (hi - lo).clamp_min(1.0)
    stretched = torch.trunc(images.to(torch.float64) * scale + (-lo * scale)).clamp(0, 255)
    return torch.where(hi > lo, stretched.to(torch.uint8), images)


def equalize(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ImageOps.equalize: per band, lut[v] = (step // 2 + count below v) // step."""
    m = images.shape[0]
    bands = torch.arange(m * 3, device=images.device).view(m, 3, 1) * 256
    hist = torch.bincount((images.flatten(2).to(torch.int64) + bands).flatten(),
                          minlength=m * 3 * 256).view(m, 3, 256)
    total = hist.sum(dim=2)
    top = images.flatten(2).amax(dim=2).to(torch.int64)
    last = torch.gather(hist, 2, top[..., None])[..., 0]
    used = (hist > 0).sum(dim=2)
    step = torch.where(used > 1, (total - last) // 255, torch.zeros_like(total))
    below = torch.cumsum(hist, dim=2) - hist
    safe = step.clamp_min(1)[..., None]
    lut = ((step[..., None] // 2 + below) // safe).clamp(max=255)
    identity = torch.arange(256, device=images.device).expand_as(lut)
    lut = torch.where(step[..., None] > 0, lut, identity)
    return torch.gather(lut, 2, images.flatten(2).to(torch.int64)).view_as(images).to(torch.uint8)


def erase(images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The box (top, left, height, width) filled with the (R, G, B) levels."""
    _, _, height, width = images.shape
    rows = torch.arange(height, device=images.device).view(1, height, 1)
    cols = torch.arange(width, device=images.device).view(1, 1, width)
    top, left = p[:, 0].to(torch.int64).view(-1, 1, 1), p[:, 1].to(torch.int64).view(-1, 1, 1)
    bottom = top + p[:, 2].to(torch.int64).view(-1, 1, 1)
    right = left + p[:, 3].to(torch.int64).view(-1, 1, 1)
    inside = ((rows >= top) & (rows < bottom) & (cols >= left) & (cols < right))[:, None]
    colour = p[:, 4:7].to(torch.uint8).view(-1, 3, 1, 1)
    return torch.where(inside, colour, images)
