"""Small deterministic image generators for tests: photo-like pixels and ImageFolder trees."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def photo_like(height: int, width: int, seed: int) -> np.ndarray:
    """An RGB uint8 array with smooth gradients, a few hard edges and mild sensor noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.empty((height, width, 3), np.float32)
    for c in range(3):
        fy, fx = rng.uniform(0.5, 3.0, 2) * np.pi / max(height, width, 1)
        phase = rng.uniform(0, 2 * np.pi)
        image[..., c] = 128 + 80 * np.sin(yy * fy + xx * fx + phase)
    for _ in range(3):  # rectangles give edges, which JPEG treats unlike gradients
        top, left = rng.integers(0, max(height, 1)), rng.integers(0, max(width, 1))
        image[top : top + height // 3 + 1, left : left + width // 3 + 1] = rng.uniform(0, 255, 3)
    image += rng.normal(0, 4, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def encode(pixels: np.ndarray, fmt: str = "JPEG", mode: str = "RGB", **options: object) -> bytes:
    """Encode an RGB array in the given format after converting it to mode."""
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").convert(mode).save(buffer, format=fmt, **options)
    return buffer.getvalue()


def make_tree(
    root: Path,
    classes: int = 3,
    per_class: int = 4,
    size: tuple[int, int] = (48, 64),
    seed: int = 0,
) -> Path:
    """Write an ImageFolder tree of baseline JPEGs: root/class_k/img_i.jpg."""
    root.mkdir(parents=True, exist_ok=True)
    for k in range(classes):
        folder = root / f"class_{k}"
        folder.mkdir(exist_ok=True)
        for i in range(per_class):
            pixels = photo_like(size[0] + i, size[1] + 2 * k, seed * 1000 + k * 100 + i)
            (folder / f"img_{i:03d}.jpg").write_bytes(encode(pixels, quality=90))
    return root
