"""Generated JPEG test corpus: every colour space, subsampling, progressive and odd sizes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from imagegen import encode, photo_like

# Pillow's subsampling codes -> the header's names.
SUBSAMPLINGS = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}
ODD_SIZES = ((1, 1), (7, 13), (17, 3000), (37, 53))


@dataclass(frozen=True)
class CorpusImage:
    """One encoded image and what its header must say."""

    name: str
    data: bytes
    height: int
    width: int
    color_space: str
    subsampling: str
    progressive: bool


def encode_jpeg(pixels: np.ndarray, mode: str, **options: object) -> bytes:
    """imagegen.encode as a JPEG in the given mode (kept for the callers of this name)."""
    return encode(pixels, "JPEG", mode, **options)


def _variants() -> list[tuple[str, str, int, bool, dict[str, object]]]:
    """(name, mode, subsampling code, progressive, extra save options) per colour case."""
    cases = []
    for progressive in (False, True):
        for code in SUBSAMPLINGS:
            cases.append(("ycbcr", "RGB", code, progressive, {}))
            cases.append(("cmyk", "CMYK", code, progressive, {}))
        cases.append(("gray", "L", 0, progressive, {}))
        cases.append(("rgb", "RGB", 0, progressive, {"keep_rgb": True}))  # Adobe transform 0
    return cases


def corpus(sizes: tuple[tuple[int, int], ...] = ODD_SIZES) -> list[CorpusImage]:
    """Every colour space x subsampling x progressive case at every size."""
    images = []
    for height, width in sizes:
        pixels = photo_like(height, width, seed=height * 7 + width)
        for space, mode, code, progressive, extra in _variants():
            data = encode_jpeg(
                pixels, mode, quality=90, subsampling=code, progressive=progressive, **extra
            )
            sub = "gray" if space == "gray" else SUBSAMPLINGS[code]
            if space == "cmyk":
                sub = "other"  # four components: no YCbCr subsampling name
            tag = "prog" if progressive else "base"
            name = f"{space}-{sub}-{tag}-{height}x{width}"
            images.append(CorpusImage(name, data, height, width, space, sub, progressive))
    return images


def photo_jpeg(height: int, width: int, seed: int, quality: int = 90, **options: object) -> bytes:
    """An ImageNet-like photo JPEG: photo_like content, smoothed by a 2x upscale."""
    small = photo_like((height + 1) // 2, (width + 1) // 2, seed)
    pixels = np.asarray(Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC))
    return encode_jpeg(pixels, "RGB", quality=quality, **options)


def random_boxes(
    rng: np.random.Generator, height: int, width: int, count: int
) -> list[tuple[int, int, int, int]]:
    """torchvision-style RandomResizedCrop boxes: scale (0.08, 1), ratio (3/4, 4/3)."""
    boxes = []
    area = height * width
    while len(boxes) < count:
        target = area * rng.uniform(0.08, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        w = round(np.sqrt(target * ratio))
        h = round(np.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            boxes.append((top, left, h, w))
    return boxes


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB between two uint8 images (inf when identical)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)
