"""FastLoader's backend="dali" delegation and gpu_transforms applied after the device copy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastloader.decode.augment import RandomResizedCrop
from fastloader.errors import InvalidArgumentError
from fastloader.gpu.ops import GpuNormalize, GpuRandomHorizontalFlip, gpu_rng
from fastloader.loader.dali.pipeline import dali_available
from fastloader.loader.loader import FastLoader
from helpers import MEAN, STD, collect


def batches(loader: FastLoader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    with loader:
        return collect(loader)


def test_gpu_transforms_equal_the_ops_applied_by_hand(dataset_path: Path) -> None:
    crop = [RandomResizedCrop(24)]
    common = {"batch_size": 4, "seed": 3, "transforms": crop, "device": "cpu", "num_threads": 1}
    plain = batches(FastLoader(dataset_path, **common))
    flip = GpuRandomHorizontalFlip(p=0.5)
    augmented = batches(FastLoader(dataset_path, gpu_transforms=[flip], normalize=(MEAN, STD),
                                   **common))
    normalize = GpuNormalize(MEAN, STD)
    assert len(plain) == len(augmented) == 6
    for b, ((images, labels), (got, got_labels)) in enumerate(zip(plain, augmented, strict=True)):
        flipped, _ = flip(images, labels, gpu_rng(3, 0, b, 0))
        expected, _ = normalize(flipped, labels, gpu_rng(3, 0, b, 0))
        assert got.dtype == torch.float32
        assert torch.equal(got_labels, labels)
        torch.testing.assert_close(got, expected)


def test_unknown_backend_names_the_choices(dataset_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="dali"):
        FastLoader(dataset_path, batch_size=4, backend="turbo")


@pytest.mark.skipif(not dali_available(), reason='NVIDIA DALI is not importable here: '
                    'pip install "fastloader[dali]" to run this')
def test_dali_backend_behind_fastloader_matches_native_crops(dataset_path: Path) -> None:
    common = {"batch_size": 4, "seed": 1, "transforms": [RandomResizedCrop(24)],
              "device": "cpu", "num_threads": 1, "shuffle": True}
    dali = FastLoader(dataset_path, backend="dali", **common)
    assert len(dali) == 6
    dali_batches = batches(dali)
    native = batches(FastLoader(dataset_path, **common))
    for (d_images, d_labels), (n_images, n_labels) in zip(dali_batches, native, strict=True):
        assert torch.equal(d_labels, n_labels)  # same sampler order
        assert d_images.shape == n_images.shape == (4, 3, 24, 24)
        # Same planned boxes; only the resize filters differ (DALI's vs Pillow's bilinear).
        difference = (d_images.float() - n_images.float()).abs().mean()
        assert difference < 4.0


def test_dali_backend_refuses_options_it_cannot_honour(dataset_path: Path) -> None:
    # Checked before DALI is imported, so this holds whether or not DALI is installed.
    with pytest.raises(InvalidArgumentError, match="memory_budget"):
        FastLoader(dataset_path, batch_size=4, backend="dali", memory_budget=1 << 20)
