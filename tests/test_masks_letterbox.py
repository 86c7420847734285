"""Masks under ResizeFit (letterbox): mapped into the same rectangle as their image, the
padding 0 (background), labels agreeing with the decoded colours; native and Pillow paths."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

import fastloader

BACKGROUND = (128, 128, 128)
COLOURS = [(255, 0, 0), (0, 200, 0), (0, 0, 255)]  # label k is COLOURS[k - 1]
PALETTE = np.array([BACKGROUND, *COLOURS], np.float32)
FILL = 7  # the image's letterbox fill: far from every palette colour


def _sample(rng: np.random.Generator) -> dict[str, object]:
    """A wide or tall grey photo with a rectangle of each colour, and its label mask."""
    height, width = (int(v) for v in rng.permutation([int(rng.integers(120, 160)),
                                                      int(rng.integers(220, 300))]))
    photo = Image.new("RGB", (width, height), BACKGROUND)
    mask = Image.new("L", (width, height), 0)
    for label in range(1, len(COLOURS) + 1):
        x0, y0 = int(rng.integers(0, width - 50)), int(rng.integers(0, height - 50))
        xy = [x0, y0, x0 + int(rng.integers(30, 50)), y0 + int(rng.integers(30, 50))]
        ImageDraw.Draw(photo).rectangle(xy, fill=COLOURS[label - 1])
        ImageDraw.Draw(mask).rectangle(xy, fill=label)
    buffer = io.BytesIO()
    photo.save(buffer, "JPEG", quality=95, subsampling=0)
    return {"image": buffer.getvalue(), "mask": np.asarray(mask).copy()}


@pytest.fixture(scope="module")
def letterbox_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(5)
    dst = tmp_path_factory.mktemp("letterbox") / "seg.lmdb"
    fastloader.pack([_sample(rng) for _ in range(16)], dst,
                    fields={"image": "image", "mask": "mask"})
    return dst


def _edges_aside(mask: np.ndarray) -> np.ndarray:
    padded = np.pad(mask, 2, mode="edge")
    same = np.ones(mask.shape, bool)
    for dy in range(5):
        for dx in range(5):
            same &= padded[dy:dy + mask.shape[0], dx:dx + mask.shape[1]] == mask
    return same


@pytest.mark.parametrize("backend", ["auto", "pillow"])
@pytest.mark.parametrize("position", ["center", "top-left"])
def test_a_letterboxed_mask_sits_in_its_images_rectangle(letterbox_dataset: Path, backend: str,
                                                          position: str) -> None:
    loader = fastloader.FastLoader(
        letterbox_dataset, batch_size=8, backend=backend, num_threads=1, seed=1,
        fields=["image", "mask", "pad"],
        transforms=[fastloader.ResizeFit(96, fill=FILL, position=position),
                    fastloader.RandomHorizontalFlip()])
    with loader:
        for images, masks, pads in loader:
            assert masks.shape == (images.shape[0], 96, 96) and str(masks.dtype) == "torch.uint8"
            for image, mask, pad in zip(images.numpy(), masks.numpy(), pads.numpy(),
                                        strict=True):
                left, top, right, bottom = (int(v) for v in pad)
                inner = np.zeros(mask.shape, bool)
                inner[top:96 - bottom, left:96 - right] = True
                assert (mask[~inner] == 0).all(), "the mask's padding is not 0"
                assert (image[:, ~inner] == FILL).all(), "the image's padding is not the fill"
                pixels = image.transpose(1, 2, 0).astype(np.float32)
                colours = np.argmin(((pixels[:, :, None] - PALETTE) ** 2).sum(-1), axis=-1)
                judged = inner & _edges_aside(mask)
                agree = (colours[judged] == mask[judged]).mean()
                assert agree >= 0.98, f"mask and pixels agree on {agree:.1%} only"
