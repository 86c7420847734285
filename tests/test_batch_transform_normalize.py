"""batch_transform= with normalize on the CPU: the decoder's threads normalize the transform's
result with the fused path's arithmetic (BatchDecoder.normalize_planar), so a transform that
changes nothing gives exactly the bits of no transform, on the native and the Pillow path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop
from fastloader.decode.decode import BatchDecoder
from fastloader.errors import FastloaderError, InvalidArgumentError
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

NORMALIZE = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


pytestmark = pytest.mark.wheel


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bt_norm")
    make_tree(root / "tree", classes=2, per_class=5, size=(40, 52))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def batches(path: Path, **kwargs: object) -> list[torch.Tensor]:
    options = {"batch_size": 4, "transforms": [RandomResizedCrop(24), RandomHorizontalFlip()],
               "device": "cpu", "num_threads": 2, "seed": 3, "normalize": NORMALIZE, **kwargs}
    with FastLoader(path, **options) as loader:  # type: ignore[arg-type]
        return [images.clone() for images, _ in loader]


def test_a_no_op_batch_transform_gives_the_bits_of_none(packed: Path) -> None:
    plain = batches(packed)
    assert plain[0].dtype == torch.float32
    for transform in (lambda images: images, lambda images: images.clone()):
        same = batches(packed, batch_transform=transform)
        assert all(torch.equal(a, b) for a, b in zip(same, plain, strict=True))


def test_the_result_is_normalized_per_channel(packed: Path) -> None:
    inverted = batches(packed, batch_transform=lambda images: 255 - images)
    plain_u8 = batches(packed, normalize=None)
    mean = torch.tensor(NORMALIZE[0]).view(1, 3, 1, 1)
    std = torch.tensor(NORMALIZE[1]).view(1, 3, 1, 1)
    expected = ((255 - plain_u8[0]).float() / 255 - mean) / std
    assert torch.allclose(inverted[0], expected, atol=1e-5)


def test_normalize_planar_matches_a_float32_multiply_then_add() -> None:
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, (3, 3, 17, 21), dtype=np.uint8)  # odd sizes: the kernel's tail
    scale = np.array([1 / 58.4, 1 / 57.1, 1 / 57.4], np.float32)
    shift = np.array([-2.1, -2.0, -1.8], np.float32)
    expected = src.astype(np.float32) * scale[None, :, None, None] + shift[None, :, None, None]
    with BatchDecoder(2) as decoder:
        out = np.empty(src.shape, np.float32)
        decoder.normalize_planar(torch.from_numpy(src), torch.from_numpy(out), scale=scale,
                                 shift=shift)
        assert np.array_equal(out, expected)
        decoder.normalize_planar(src, out)  # no constants: a plain conversion
        assert np.array_equal(out, src.astype(np.float32))
        with pytest.raises(InvalidArgumentError, match="src"):
            decoder.normalize_planar(src.astype(np.float32), out)
        with pytest.raises(InvalidArgumentError, match="out"):
            decoder.normalize_planar(src, out[:, :, :, :5])
        read_only = out.copy()
        read_only.flags.writeable = False
        with pytest.raises(InvalidArgumentError, match="out must be writable"):
            decoder.normalize_planar(src, read_only)
    with pytest.raises(FastloaderError, match="closed"):
        decoder.normalize_planar(src, out)
