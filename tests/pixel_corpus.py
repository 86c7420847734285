"""A varied JPEG corpus for backend pixel parity: photo-like texture (what makes a scaled IDCT
differ from Pillow's filter) in every colour space, subsampling and coding, at odd sizes."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

from jpeg_edits import segments

SIZES = ((375, 500), (480, 640), (301, 451), (800, 800), (37, 1999))


def textured(height: int, width: int, seed: int) -> np.ndarray:
    """RGB uint8: value noise over four octaves, hard-edged shapes and sensor noise, about as
    busy as a photo (a 500x375 quality-90 JPEG of it is ~100 KB)."""
    rng = np.random.default_rng(seed)
    image = np.zeros((height, width, 3), np.float32)
    for octave in range(4):
        cells = 4 * 2**octave
        grid = rng.standard_normal((cells + 2, cells + 2, 3)).astype(np.float32)
        for c in range(3):
            layer = Image.fromarray(grid[..., c], "F").resize((width, height),
                                                              Image.Resampling.BICUBIC)
            image[..., c] += np.asarray(layer) * (60.0 / 1.6**octave)
    canvas = Image.fromarray(np.clip(image + 128, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(canvas)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1 = x0 + int(rng.integers(2, width // 3 + 3))
        y1 = y0 + int(rng.integers(2, height // 3 + 3))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
    pixels = np.asarray(canvas, np.float32) + rng.normal(0, 5, (height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _save(pixels: np.ndarray, mode: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").convert(mode).save(buffer, "JPEG", **options)
    return buffer.getvalue()


def as_ycck(cmyk: bytes) -> bytes:
    """A CMYK JPEG relabelled YCCK (its Adobe APP14 transform byte set to 2): libjpeg and Pillow
    then convert its planes from YCC; the pixels are odd but the file is a valid YCCK one."""
    at, _, length = next(s for s in segments(cmyk) if s[1] == 0xEE)
    data = bytearray(cmyk)
    assert length == 14 and data[at + 4 : at + 9] == b"Adobe"
    data[at + 15] = 2
    return bytes(data)


def corpus() -> dict[str, bytes]:
    """name -> JPEG bytes: every SIZES entry in eight codings."""
    images = {}
    for k, (height, width) in enumerate(SIZES):
        pixels = textured(height, width, seed=100 + k)
        tag = f"{height}x{width}"
        for code, name in ((0, "444"), (1, "422"), (2, "420")):
            images[f"ycbcr-{name}-{tag}"] = _save(pixels, "RGB", quality=90, subsampling=code)
        images[f"progressive-{tag}"] = _save(pixels, "RGB", quality=85, progressive=True)
        images[f"restart-{tag}"] = _save(pixels, "RGB", quality=95, restart_marker_blocks=5)
        images[f"gray-{tag}"] = _save(pixels, "L", quality=90)
        cmyk = _save(pixels, "CMYK", quality=90)
        images[f"cmyk-{tag}"] = cmyk
        images[f"ycck-{tag}"] = as_ycck(cmyk)
    return images
