"""Pixel ops in the packed loader's transforms=: each sample's program drawn from (seed, epoch, key,
view) and fused into the decode on the CPU route, or run after the copy as batched torch ops on
the device route (pixel_ops_on="device", here on the CPU device), the two within MAE 2, composed
with MixUp and normalize; and what refuses them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fastloader
from fastloader import ColorJitter, RandomErasing, RandomGrayscale, TrivialAugmentWide
from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop
from fastloader.decode.pixels import apply_program_reference, draw_program
from fastloader.gpu.pixel_ops import GpuMixUp
from fastloader.loader.loader import FastLoader
from helpers import BAD, MEAN, STD, damaged

GEOMETRY = [RandomResizedCrop(24), RandomHorizontalFlip()]
PIXELS = [ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), RandomGrayscale(p=0.3)]
BATCH = 5


def run(path: Path, **options: Any) -> list[tuple[Any, torch.Tensor]]:
    """One pass of epoch 3, each batch cloned."""
    settings = {"batch_size": BATCH, "device": "cpu", "num_threads": 2, "seed": 9,
                "shuffle": True, **options}
    with FastLoader(path, **settings) as loader:
        loader.set_epoch(3)
        out = []
        for images, labels in loader:
            images = [v.clone() for v in images] if isinstance(images, list) else images.clone()
            out.append((images, labels.clone()))
        return out


def mae(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().mean())


@pytest.mark.parametrize("rank, world", [(0, 1), (1, 2)])
def test_each_sample_gets_the_program_of_its_key_fused_in_the_decode(
        dataset_path: Path, rank: int, world: int) -> None:
    where = {"rank": rank, "world_size": world}
    plain = run(dataset_path, transforms=GEOMETRY, **where)
    ops = run(dataset_path, transforms=[*GEOMETRY, *PIXELS], pixel_ops_on="cpu", **where)
    changed = 0
    for b, ((before, labels), (after, same_labels)) in enumerate(zip(plain, ops, strict=True)):
        assert torch.equal(labels, same_labels)  # the ops never move the crops
        # a sample's key: its place in the epoch, unique across the ranks
        keys = (b * BATCH + np.arange(len(labels), dtype=np.int64)) * world + rank
        program = draw_program(tuple(PIXELS), 9, 3, keys, 0, 24, 24)
        expected = before.permute(0, 2, 3, 1).contiguous().numpy()
        apply_program_reference(expected, program)
        assert mae(after.permute(0, 2, 3, 1), torch.from_numpy(expected)) < 1.0
        changed += int(not torch.equal(before, after))
    assert changed  # the ops ran


@pytest.mark.parametrize("normalize", [None, (MEAN, STD)])
def test_the_device_route_matches_the_fused_route(dataset_path: Path,
                                                  normalize: Any) -> None:
    options = {"transforms": [*GEOMETRY, *PIXELS], "normalize": normalize}
    fused = run(dataset_path, pixel_ops_on="cpu", **options)
    device = run(dataset_path, pixel_ops_on="device", **options)
    plain = run(dataset_path, transforms=GEOMETRY, normalize=normalize)
    scale = 1.0 if normalize is None else 255.0 * float(np.mean(STD))  # back to pixel levels
    for (a, la), (b, lb), (c, _) in zip(fused, device, plain, strict=True):
        assert torch.equal(la, lb) and a.dtype == b.dtype and a.shape == b.shape
        assert mae(a, b) * scale < 2.0
        assert mae(b, c) * scale > 2.0  # the device route ran the ops


@pytest.mark.native
def test_native_and_pillow_backends_give_the_same_ops(dataset_path: Path) -> None:
    options = {"transforms": [*GEOMETRY, *PIXELS], "pixel_ops_on": "cpu"}
    native = run(dataset_path, backend="native", **options)
    pillow = run(dataset_path, backend="pillow", **options)
    for (a, la), (b, lb) in zip(native, pillow, strict=True):
        assert torch.equal(la, lb) and mae(a, b) < 2.0


def test_the_trivialaugment_recipe_runs_the_same_on_both_routes(dataset_path: Path) -> None:
    recipe = [*GEOMETRY, TrivialAugmentWide(), RandomErasing(p=0.5)]
    fused = run(dataset_path, transforms=recipe, pixel_ops_on="cpu")
    device = run(dataset_path, transforms=recipe, pixel_ops_on="device")
    plain = run(dataset_path, transforms=GEOMETRY)
    for (a, la), (b, lb), (c, _) in zip(fused, device, plain, strict=True):
        assert torch.equal(la, lb) and mae(a, b) < 2.0 and mae(a, c) > 2.0


def test_views_run_their_ops_on_the_device_route_too(dataset_path: Path) -> None:
    views = [fastloader.View([*GEOMETRY, *PIXELS], count=2),
             fastloader.View([RandomResizedCrop(12), *PIXELS])]
    fused = run(dataset_path, views=views, pixel_ops_on="cpu")
    device = run(dataset_path, views=views, pixel_ops_on="device")
    for (a, la), (b, lb) in zip(fused, device, strict=True):
        assert torch.equal(la, lb) and len(a) == len(b) == 3
        for x, y in zip(a, b, strict=True):
            assert x.shape == y.shape and mae(x, y) < 2.0


def test_mixup_composes_with_the_pixel_ops_on_either_route(dataset_path: Path) -> None:
    mixup = [GpuMixUp(alpha=0.4, num_classes=3)]
    options = {"transforms": [*GEOMETRY, *PIXELS], "gpu_transforms": mixup,
               "normalize": (MEAN, STD)}
    fused = run(dataset_path, pixel_ops_on="cpu", **options)
    device = run(dataset_path, pixel_ops_on="device", **options)
    for (a, la), (b, lb) in zip(fused, device, strict=True):
        assert la.shape == (len(la), 3) and la.dtype == torch.float32  # soft targets
        assert torch.allclose(la, lb)
        assert a.dtype == torch.float32 and mae(a, b) * 255 * float(np.mean(STD)) < 2.0


@pytest.mark.native_neutral
def test_pixel_op_arguments_are_checked_before_opening(tmp_path: Path) -> None:
    missing = tmp_path / "never-opened.lmdb"
    with pytest.raises(fastloader.InvalidArgumentError, match=r"transforms\[2\]=.*pixel op"):
        FastLoader(missing, device="cpu", transforms=[ColorJitter(0.4), RandomHorizontalFlip(),
                                                      RandomResizedCrop(8)])
    # a bad transform after a pixel op is named by its place in what the user passed
    with pytest.raises(fastloader.InvalidArgumentError, match=r"transforms\[2\]='crop'"):
        FastLoader(missing, device="cpu", transforms=[RandomResizedCrop(8), ColorJitter(0.4),
                                                      "crop"])
    with pytest.raises(fastloader.InvalidArgumentError, match=r"batch_transform=.*device"):
        FastLoader(missing, device="cpu", transforms=[*GEOMETRY, *PIXELS],
                   pixel_ops_on="device", batch_transform=lambda x: x)
    with pytest.raises(fastloader.InvalidArgumentError, match="pixel_ops_on='both'"):
        FastLoader(missing, device="cpu", transforms=GEOMETRY, pixel_ops_on="both")


def test_a_replaced_sample_takes_its_place_s_program_on_either_route(dataset_path: Path) -> None:
    dataset = damaged(dataset_path, "garbage")
    options = {"transforms": [*GEOMETRY, ColorJitter(0.6, 0.6, p=1.0)], "on_error": "skip",
               "shuffle": False}
    try:
        fused = run(dataset, pixel_ops_on="cpu", **options)
        device = run(dataset, pixel_ops_on="device", **options)
    finally:
        dataset.close()
    b, k = divmod(BAD, BATCH)  # the bad record's place: its replacement decoded there
    assert int(fused[b][1][k]) == int(device[b][1][k])
    assert mae(fused[b][0][k], device[b][0][k]) < 2.0
    for (a, la), (c, lc) in zip(fused, device, strict=True):
        assert torch.equal(la, lc) and mae(a, c) < 2.0


@pytest.mark.parametrize("route", ["cpu", "device"])
def test_views_come_in_the_asked_layout_and_dtype_on_either_route(dataset_path: Path,
                                                                  route: str) -> None:
    views = [fastloader.View([*GEOMETRY, *PIXELS], count=2)]
    batches = run(dataset_path, views=views, pixel_ops_on=route, normalize=(MEAN, STD),
                  dtype=torch.bfloat16, memory_format=torch.channels_last)
    for crops, _ in batches:
        assert len(crops) == 2
        for crop in crops:
            assert crop.dtype == torch.bfloat16 and crop.shape[1:] == (3, 24, 24)
            assert crop.is_contiguous(memory_format=torch.channels_last)
