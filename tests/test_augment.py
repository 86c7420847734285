"""Tests of decode-time transform planning: torchvision's box rules, seeding, validation."""

from __future__ import annotations

import numpy as np
import pytest

from fastloader.decode.augment import (
    CenterCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    check_transforms,
    output_size,
    plan,
)
from fastloader.decode.geometry import PlanState
from fastloader.errors import InvalidArgumentError, InvalidTypeError

SHAPES = np.array([[48, 64], [375, 500], [500, 375], [10, 300], [224, 224]] * 40)


pytestmark = pytest.mark.native_neutral


def _inside(crops: np.ndarray, shapes: np.ndarray) -> bool:
    top, left, h, w = crops.T
    return bool(
        (top >= 0).all() and (left >= 0).all() and (h >= 1).all() and (w >= 1).all()
        and (top + h <= shapes[:, 0]).all() and (left + w <= shapes[:, 1]).all()
    )


def test_random_resized_crop_boxes_follow_scale_and_ratio() -> None:
    op = RandomResizedCrop(32, scale=(0.25, 0.5), ratio=(0.75, 1.33))
    crops, flips, size = plan([op], SHAPES, np.random.default_rng(0))
    assert size == (32, 32) and crops.dtype == np.int32 and not flips.any()
    assert _inside(crops, SHAPES)
    big = SHAPES[:, 0] >= 48  # the thin 10x300 image falls back to the centre box
    area = crops[big, 2] * crops[big, 3] / (SHAPES[big, 0] * SHAPES[big, 1])
    assert area.min() > 0.2 and area.max() < 0.56
    ratio = crops[big, 3] / crops[big, 2]
    assert ratio.min() > 0.7 and ratio.max() < 1.42


def test_centre_fallback_matches_torchvision() -> None:
    # A 10x300 strip cannot hold any box with ratio <= 4/3 and area >= 8%: torchvision's
    # fallback keeps the full height and a width of round(10 * 4/3) = 13, centred.
    crops, _, _ = plan([RandomResizedCrop(8)], np.array([[10, 300]]), np.random.default_rng(1))
    assert crops.tolist() == [[0, 143, 10, 13]]


def test_same_seed_same_plan_and_different_seed_differs() -> None:
    ops = [RandomResizedCrop(24), RandomHorizontalFlip()]
    a = plan(ops, SHAPES, np.random.default_rng([1, 2, 3]))
    b = plan(ops, SHAPES, np.random.default_rng([1, 2, 3]))
    c = plan(ops, SHAPES, np.random.default_rng([1, 2, 4]))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    assert 0.3 < a[1].mean() < 0.7


def test_resize_then_center_crop_is_the_validation_box() -> None:
    # Resize(256) of 375x500 -> 256x341; CenterCrop(224) there is rows 16.., cols 58..
    # (round(58.5) = 58), which is 16*375/256 = 23.4 and 58*500/341 = 85.0 in the source.
    crops, flips, size = plan([Resize(256), CenterCrop(224)], np.array([[375, 500]]),
                              np.random.default_rng(0))
    assert size == (224, 224) and not flips.any()
    assert crops.tolist() == [[23, 85, 329, 328]]


def test_flip_before_crop_mirrors_the_box() -> None:
    boxes = PlanState(np.array([[100, 200], [100, 200]]))
    boxes.flip[:] = [True, False]
    boxes.crop(np.array([10, 10]), np.array([20, 20]), np.array([50, 50]), np.array([60, 60]))
    # Columns 20..80 of the mirrored view are columns 120..180 of the source.
    assert boxes.integer_crops().tolist() == [[10, 120, 50, 60], [10, 20, 50, 60]]


def test_output_size_requires_one_size() -> None:
    assert output_size([], np.array([[5, 6], [5, 6]])) == (5, 6)
    with pytest.raises(InvalidArgumentError, match="RandomResizedCrop"):
        output_size([], np.array([[5, 6], [7, 6]]))
    assert output_size([Resize((8, 9))], np.array([[5, 6], [7, 6]])) == (8, 9)


def test_bad_transform_arguments_are_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="scale"):
        RandomResizedCrop(224, scale=(0.9, 0.1))
    with pytest.raises(InvalidArgumentError, match="size"):
        CenterCrop(0)
    with pytest.raises(InvalidTypeError, match="size"):
        Resize("big")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="p="):
        RandomHorizontalFlip(1.5)
    with pytest.raises(InvalidArgumentError, match="transforms"):
        check_transforms([lambda image: image])
    assert check_transforms(Resize(3)) == (Resize(3),)
