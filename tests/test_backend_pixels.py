"""Every decode-time transform gives the Pillow backend's pixels within MAE 2 (0-255 scale) on
every image of a varied corpus, on the native backend (DCT scaling included)."""

from __future__ import annotations

import numpy as np
import pytest

from fastloader.decode.augment import (
    CenterCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    plan_geometry,
)
from fastloader.decode.decode import BatchDecoder, decode, header
from fastloader.decode.detect import ResizeFit
from fastloader.decode.pillow import decode_pillow
from pixel_corpus import corpus

pytestmark = [pytest.mark.native, pytest.mark.wheel]

BOUND = 2.0  # the README's promise: mean absolute difference per image, 0-255 scale
CORPUS = corpus()
TRANSFORMS = {
    "Resize(32)+CenterCrop(32)": [Resize(32), CenterCrop(32)],
    "Resize(73)+CenterCrop(64)": [Resize(73), CenterCrop(64)],
    "Resize(64)+CenterCrop(64)": [Resize(64), CenterCrop(64)],
    "Resize(256)+CenterCrop(224)": [Resize(256), CenterCrop(224)],
    "Resize((40,30))": [Resize((40, 30))],
    "RandomResizedCrop(32)": [RandomResizedCrop(32), RandomHorizontalFlip()],
    "RandomResizedCrop(112)": [RandomResizedCrop(112), RandomHorizontalFlip()],
    "RandomResizedCrop(224)": [RandomResizedCrop(224), RandomHorizontalFlip()],
    "ResizeFit(96)": [ResizeFit(96)],
    "ResizeFit(320)": [ResizeFit(320, fill=114)],
}
SAMPLES = 4  # planned draws per image and transform (RandomResizedCrop's differ)


def _mae(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-sample mean absolute difference of two (N, H, W, 3) batches."""
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return diff.reshape(len(a), -1).mean(axis=1)


def _batch(decoder: BatchDecoder, data: bytes, geometry) -> np.ndarray:
    out = np.zeros((SAMPLES, *geometry.size, 3), np.uint8)
    errors = decoder.decode_into([data] * SAMPLES, geometry.crops, geometry.flips, out,
                                 places=geometry.places, fill=geometry.fill)
    assert errors == [None] * SAMPLES
    return out


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_transform_stays_within_mae_2_of_pillow(name: str) -> None:
    data = CORPUS[name]
    hdr = header(data)
    shapes = np.array([[hdr.height, hdr.width]] * SAMPLES)
    worst = {}
    with BatchDecoder(1, "native") as native, BatchDecoder(1, "pillow") as pillow:
        for k, (label, transforms) in enumerate(TRANSFORMS.items()):
            geometry = plan_geometry(transforms, shapes, np.random.default_rng([k, len(data)]))
            worst[label] = float(_mae(_batch(native, data, geometry),
                                      _batch(pillow, data, geometry)).max())
    over = {label: round(v, 2) for label, v in worst.items() if v > BOUND}
    assert not over, f"{name}: over MAE {BOUND}: {over}"


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_decode_size_stays_within_mae_2_of_pillow(name: str) -> None:
    data = CORPUS[name]
    hdr = header(data)
    for size in ((max(1, hdr.height // 3), max(1, hdr.width // 3)),
                 (max(1, hdr.height // 7), max(1, hdr.width // 7)), (24, 32)):
        got = decode(data, size=size)
        want = decode_pillow(data, None, size, False)
        assert _mae(got[None], want[None])[0] <= BOUND, (name, size)
