"""Batched GPU ops (run on the CPU here) against per-sample reference implementations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fastloader.decode.augment import CenterCrop, RandomHorizontalFlip, Resize
from fastloader.errors import InvalidArgumentError, InvalidTypeError
from fastloader.gpu.ops import (
    GpuCompose,
    GpuGeometry,
    GpuNormalize,
    GpuRandomHorizontalFlip,
    GpuRandomResizedCrop,
    GpuTransform,
    apply_gpu_transforms,
    gpu_rng,
    resized_crop,
)
from fastloader.gpu.pixel_ops import GpuColorJitter, GpuCutMix, GpuMixUp
from helpers import MEAN, STD

pytestmark = pytest.mark.native_neutral


def batch(n: int = 6, h: int = 20, w: int = 28, seed: int = 0) -> torch.Tensor:
    """A uint8 NCHW batch of smooth, distinct images (smooth so bilinear errors stay small)."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randint(0, 256, (n, 3, 5, 7), generator=g).float()
    return F.interpolate(coarse, size=(h, w), mode="bilinear").round().to(torch.uint8)


def bilinear_reference(image: np.ndarray, box: np.ndarray, out: tuple[int, int]) -> np.ndarray:
    """Sample box (top, left, h, w) of a CHW float image at out's pixel centres, border-clamped."""
    _, height, width = image.shape
    top, left, box_h, box_w = (float(v) for v in box)
    ys = np.clip(top + (np.arange(out[0]) + 0.5) * box_h / out[0] - 0.5, 0, height - 1)
    xs = np.clip(left + (np.arange(out[1]) + 0.5) * box_w / out[1] - 0.5, 0, width - 1)
    result = np.empty((image.shape[0], *out))
    for i, y in enumerate(ys):
        y0 = int(np.floor(y))
        y1, wy = min(y0 + 1, height - 1), y - y0
        for j, x in enumerate(xs):
            x0 = int(np.floor(x))
            x1, wx = min(x0 + 1, width - 1), x - x0
            top_row = image[:, y0, x0] * (1 - wx) + image[:, y0, x1] * wx
            bottom_row = image[:, y1, x0] * (1 - wx) + image[:, y1, x1] * wx
            result[:, i, j] = top_row * (1 - wy) + bottom_row * wy
    return result


def test_resized_crop_matches_bilinear_reference_with_flips() -> None:
    images = batch().double()
    boxes = np.array([[0, 0, 20, 28], [3, 5, 10, 12], [10, 14, 10, 14], [1, 2, 7, 3],
                      [0, 20, 20, 8], [5, 5, 15, 15]])
    flips = np.array([False, True, False, True, True, False])
    out = resized_crop(images, boxes, (16, 18), flips)
    for k in range(len(boxes)):
        expected = bilinear_reference(images[k].numpy(), boxes[k], (16, 18))
        if flips[k]:
            expected = expected[:, :, ::-1]
        np.testing.assert_allclose(out[k].numpy(), expected, atol=1e-9)


def test_resized_crop_equals_crop_then_interpolate_when_downscaling() -> None:
    images = batch().float()
    boxes = np.array([[0, 0, 20, 28], [2, 3, 16, 20], [4, 6, 12, 14], [0, 10, 10, 18],
                      [8, 0, 12, 12], [1, 1, 18, 26]])
    out = resized_crop(images, boxes, (10, 12))
    for k, (top, left, h, w) in enumerate(boxes):
        crop = images[k : k + 1, :, top : top + h, left : left + w]
        expected = F.interpolate(crop, size=(10, 12), mode="bilinear", align_corners=False)
        torch.testing.assert_close(out[k : k + 1], expected, atol=1e-3, rtol=0)


def test_uint8_results_are_the_rounded_float_results() -> None:
    images = batch()
    boxes = np.array([[1, 2, 9, 13]] * len(images))
    as_uint8 = resized_crop(images, boxes, (11, 11))
    as_float = resized_crop(images.float(), boxes, (11, 11))
    assert as_uint8.dtype == torch.uint8
    torch.testing.assert_close(as_uint8, as_float.round().clamp(0, 255).to(torch.uint8))


def test_random_resized_crop_uses_the_decode_time_planner() -> None:
    images = batch(n=8)
    op = GpuRandomResizedCrop(12, scale=(0.2, 1.0))
    out, labels = op(images, torch.arange(8), gpu_rng(3, 1, 2))
    boxes, flips, size = op.plan(gpu_rng(3, 1, 2), 8, 20, 28)
    assert out.shape == (8, 3, 12, 12) and out.dtype == torch.uint8 and size == (12, 12)
    assert not flips.any() and len({tuple(b) for b in boxes}) > 1
    assert torch.equal(out, resized_crop(images, boxes, (12, 12), antialias=True))
    assert torch.equal(labels, torch.arange(8))


def test_geometry_validation_pipeline_is_resize_then_centre_crop() -> None:
    images = batch(n=3, h=24, w=32).float()
    out, _ = GpuGeometry([Resize(12), CenterCrop(12)])(images, torch.zeros(3), gpu_rng(0, 0, 0))
    # The planner maps the centre crop back to source columns 4..28; like the decode path the
    # box is cropped, then resized (antialiased), so taps never reach outside it.
    resized = F.interpolate(images[:, :, :, 4:28], size=(12, 12), mode="bilinear",
                            align_corners=False, antialias=True)
    torch.testing.assert_close(out, resized, atol=1e-3, rtol=0)


def test_flip_matches_per_sample_reference() -> None:
    images = batch(n=16)
    out, _ = GpuRandomHorizontalFlip(0.5)(images, torch.arange(16), gpu_rng(1, 0, 0))
    mask = gpu_rng(1, 0, 0).random(16) < 0.5
    assert 0 < mask.sum() < 16
    for k in range(16):
        assert torch.equal(out[k], images[k].flip(-1) if mask[k] else images[k])


def jitter_reference(image: torch.Tensor, factors: np.ndarray, bound: float) -> torch.Tensor:
    """torchvision's adjust_brightness/contrast/saturation blends on one CHW float image."""
    luma = torch.tensor([0.2989, 0.587, 0.114], dtype=image.dtype).view(3, 1, 1)
    x = (image * factors[0]).clamp(0, bound)
    mean = (x * luma).sum(0).mean()
    x = (factors[1] * x + (1 - factors[1]) * mean).clamp(0, bound)
    gray = (x * luma).sum(0, keepdim=True)
    return (factors[2] * x + (1 - factors[2]) * gray).clamp(0, bound)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float64])
def test_color_jitter_matches_per_sample_reference(dtype: torch.dtype) -> None:
    images = batch(n=5) if dtype == torch.uint8 else batch(n=5).double() / 255
    op = GpuColorJitter(brightness=0.4, contrast=0.4, saturation=(0.2, 1.8))
    out, _ = op(images, torch.arange(5), gpu_rng(2, 0, 1))
    factors = op.factors(gpu_rng(2, 0, 1), 5)
    bound = 255.0 if dtype == torch.uint8 else 1.0
    assert out.dtype == dtype and len(np.unique(factors[0])) == 5
    for k in range(5):
        expected = jitter_reference(images[k].double(), factors[:, k], bound)
        if dtype == torch.uint8:
            expected = expected.round().to(torch.uint8)
            assert (out[k].int() - expected.int()).abs().max() <= 1  # float32 vs float64 ties
        else:
            torch.testing.assert_close(out[k], expected)


def test_normalize_matches_reference_and_dtype() -> None:
    images = batch(n=2)
    out, _ = GpuNormalize(MEAN, STD, dtype=torch.float16)(images, torch.arange(2), gpu_rng(0, 0, 0))
    assert out.dtype == torch.float16 and out.shape == images.shape
    for c in range(3):
        expected = (images[:, c].float() / 255 - MEAN[c]) / STD[c]
        torch.testing.assert_close(out[:, c].float(), expected, atol=2e-3, rtol=1e-3)


def test_mixup_matches_reference_and_makes_soft_targets() -> None:
    images, labels = batch(n=4).float(), torch.tensor([0, 2, 1, 2])
    out, targets = GpuMixUp(alpha=0.4, num_classes=3)(images, labels, gpu_rng(5, 0, 0))
    lam = gpu_rng(5, 0, 0).beta(0.4, 0.4)
    onehot = F.one_hot(labels, 3).float()
    for k in range(4):
        torch.testing.assert_close(out[k], lam * images[k] + (1 - lam) * images[k - 1])
        torch.testing.assert_close(targets[k], lam * onehot[k] + (1 - lam) * onehot[k - 1])
    torch.testing.assert_close(targets.sum(1), torch.ones(4))


def test_cutmix_pastes_one_box_and_weights_labels_by_its_area() -> None:
    images, labels = batch(n=4), torch.tensor([0, 1, 2, 3])
    op = GpuCutMix(alpha=1.0, num_classes=4)
    out, targets = op(images, labels, gpu_rng(9, 0, 0))
    y1, y2, x1, x2 = op.box(gpu_rng(9, 0, 0), 20, 28)
    lam = 1 - (y2 - y1) * (x2 - x1) / (20 * 28)
    for k in range(4):
        expected = images[k].clone()
        expected[:, y1:y2, x1:x2] = images[k - 1][:, y1:y2, x1:x2]
        assert torch.equal(out[k], expected)
        assert targets[k, k] == pytest.approx(lam) and targets[k, k - 1] == pytest.approx(1 - lam)


def test_same_seed_same_result_and_batches_differ() -> None:
    ops = [GpuRandomResizedCrop(10), GpuRandomHorizontalFlip(), GpuColorJitter(0.3, 0.3, 0.3)]
    images, labels = batch(n=6), torch.arange(6)
    first = apply_gpu_transforms(ops, images, labels, seed=4, epoch=2, batch_index=7)[0]
    again = apply_gpu_transforms(ops, images, labels, seed=4, epoch=2, batch_index=7)[0]
    other = apply_gpu_transforms(ops, images, labels, seed=4, epoch=2, batch_index=8)[0]
    other_rank = apply_gpu_transforms(ops, images, labels, seed=4, epoch=2, batch_index=7, rank=1)
    assert torch.equal(first, again)
    assert not torch.equal(first, other) and not torch.equal(first, other_rank[0])


def test_every_op_follows_the_protocol_and_composes() -> None:
    ops = [GpuGeometry([CenterCrop(16), RandomHorizontalFlip()]), GpuColorJitter(0.2),
           GpuNormalize(MEAN, STD), GpuMixUp(0.2, 6), GpuCutMix(1.0, 6)]
    assert all(isinstance(op, GpuTransform) for op in ops)
    out, targets = GpuCompose(ops)(batch(), torch.arange(6), gpu_rng(0, 0, 0))
    assert out.shape == (6, 3, 16, 16) and out.dtype == torch.float32
    assert targets.shape == (6, 6) and torch.allclose(targets.sum(1), torch.ones(6))


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: GpuRandomHorizontalFlip(1.5), InvalidArgumentError),
        (lambda: GpuRandomResizedCrop(0), InvalidArgumentError),
        (lambda: GpuRandomResizedCrop(8, mode="area"), InvalidArgumentError),
        (lambda: GpuColorJitter(brightness=-0.1), InvalidArgumentError),
        (lambda: GpuColorJitter(contrast="x"), InvalidTypeError),
        (lambda: GpuNormalize(MEAN, (0.2, 0.0, 0.2)), InvalidArgumentError),
        (lambda: GpuNormalize(MEAN, STD[:2]), InvalidArgumentError),
        (lambda: GpuNormalize(MEAN, STD, dtype=torch.int32), InvalidArgumentError),
        (lambda: GpuMixUp(0.0, 3), InvalidArgumentError),
        (lambda: GpuCutMix(1.0, 0), InvalidArgumentError),
        (lambda: GpuCompose("flip"), InvalidTypeError),
        (lambda: gpu_rng(-1, 0, 0), InvalidArgumentError),
    ],
)
def test_bad_arguments_raise_clear_errors(make: object, error: type) -> None:
    with pytest.raises(error):
        make()  # type: ignore[operator]


def test_bad_inputs_raise_clear_errors() -> None:
    rng = gpu_rng(0, 0, 0)
    flip = GpuRandomHorizontalFlip()
    with pytest.raises(InvalidArgumentError, match="4-D"):
        flip(torch.zeros(3, 8, 8, dtype=torch.uint8), torch.zeros(3), rng)
    with pytest.raises(InvalidArgumentError, match="uint8 or a floating"):
        flip(torch.zeros(1, 3, 8, 8, dtype=torch.int32), torch.zeros(1), rng)
    with pytest.raises(InvalidArgumentError, match="3 channels"):
        GpuColorJitter(0.1)(torch.zeros(1, 1, 8, 8), torch.zeros(1), rng)
    with pytest.raises(InvalidArgumentError, match="num_classes"):
        GpuMixUp(0.2, 2)(batch(n=2), torch.tensor([0, 5]), rng)
    with pytest.raises(InvalidArgumentError, match="one crop box per image"):
        resized_crop(batch(n=2), np.zeros((3, 4)), (4, 4))
