"""Masks follow the fused crop: generated photos with coloured shapes and a label mask drawn by
the same calls (label k where shape k is, colour COLOURS[k - 1] in the photo).

After random crops, resizes and flips the output mask must agree with the decoded pixels' colours
(>= 98% of pixels, edges aside), equal Pillow's own NEAREST resample of the planned crop (so a
bilinear or misplaced sampling fails), and bound each kept box of a rectangle (IoU >= 0.9).
Runs through the native decode and (backend="pillow", and make test's second run with
FASTLOADER_DISABLE_NATIVE=1) through the Pillow path.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

import fastloader
from fastloader.decode.augment import batch_rng, plan
from helpers import BAD, batches_on_devices, box_iou, damaged, palette_classes

BACKGROUND = (128, 128, 128)
COLOURS = [(255, 0, 0), (0, 200, 0), (0, 0, 255), (255, 255, 0)]  # label k is COLOURS[k - 1]
PALETTE = np.array([BACKGROUND, *COLOURS], np.float32)
RECTANGLES = (1, 3)  # labels drawn as rectangles (their box is their pixels' box when cropped)
FIELDS = {"image": "image", "mask": "mask", "boxes": ("boxes", ["box_labels"]),
          "box_labels": ("ndarray", "int64", (-1,)), "idx": "int"}
SEED = 3


def _draw(draw: ImageDraw.ImageDraw, label: int, xy: list[int], fill: object) -> None:
    x0, y0, x1, y1 = xy
    if label in RECTANGLES:
        draw.rectangle(xy, fill=fill)  # type: ignore[arg-type]
    elif label == 2:
        draw.ellipse(xy, fill=fill)  # type: ignore[arg-type]
    else:
        draw.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=fill)  # type: ignore[arg-type]


def _photo(rng: np.random.Generator, index: int) -> dict[str, object]:
    """A grey photo of 2x2 cells, in most cells a shape of its own colour, kept apart."""
    height, width = (int(v) for v in rng.integers(224, 289, size=2))
    photo = Image.new("RGB", (width, height), BACKGROUND)
    mask = Image.new("L", (width, height), 0)
    boxes, labels = [], []
    cell_h, cell_w = height // 2, width // 2
    for cell, label in enumerate((rng.permutation(len(COLOURS)) + 1).tolist()):
        if rng.random() < 0.15:
            continue
        box_h, box_w = int(rng.integers(60, cell_h - 8)), int(rng.integers(60, cell_w - 8))
        top = (cell // 2) * cell_h + 4 + int(rng.integers(0, cell_h - 8 - box_h + 1))
        left = (cell % 2) * cell_w + 4 + int(rng.integers(0, cell_w - 8 - box_w + 1))
        xy = [left, top, left + box_w - 1, top + box_h - 1]
        _draw(ImageDraw.Draw(photo), label, xy, COLOURS[label - 1])
        _draw(ImageDraw.Draw(mask), label, xy, label)
        rows, cols = np.nonzero(np.asarray(mask) == label)
        boxes.append([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1])
        labels.append(label)
    buffer = io.BytesIO()  # 4:4:4 so colour edges stay where the pixels are
    photo.save(buffer, "JPEG", quality=95, subsampling=0)
    return {"image": buffer.getvalue(), "mask": np.asarray(mask).copy(),
            "boxes": np.array(boxes, np.float32).reshape(-1, 4),
            "box_labels": np.array(labels, np.int64), "idx": index}


@pytest.fixture(scope="module")
def shapes_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    rng = np.random.default_rng(18)
    samples = [_photo(rng, i) for i in range(40)]
    dst = tmp_path_factory.mktemp("masks") / "shapes.lmdb"
    fastloader.pack(samples, dst, fields=FIELDS)
    return dst, samples


def _inside(mask: np.ndarray, radius: int = 2) -> np.ndarray:
    """Pixels whose labels are the same within `radius` (the edges set aside)."""
    padded = np.pad(mask, radius, mode="edge")
    same = np.ones(mask.shape, bool)
    height, width = mask.shape
    for dy in range(2 * radius + 1):
        for dx in range(2 * radius + 1):
            same &= padded[dy:dy + height, dx:dx + width] == mask
    return same


def _pillow_nearest(mask: np.ndarray, crop: np.ndarray, flip: bool,
                    size: tuple[int, int]) -> np.ndarray:
    """Pillow's NEAREST resample of the crop box (it samples output pixel centres too)."""
    top, left, height, width = (int(v) for v in crop)
    out = Image.fromarray(mask).resize((size[1], size[0]), Image.Resampling.NEAREST,
                                       box=(left, top, left + width, top + height))
    if flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out)


def _check_nearest(mask: np.ndarray, reference: np.ndarray, where: str) -> None:
    """mask is Pillow's NEAREST resample but where a sample point falls on a pixel border
    (Pillow's fixed-point rounding may take the other pixel): few differences, each a label of
    the reference's 3x3 neighbourhood (a blended or shifted label fails)."""
    differ = mask != reference
    assert differ.mean() <= 0.005, f"{where}: {differ.mean():.2%} differ from NEAREST"
    padded = np.pad(reference, 1, mode="edge")
    for y, x in zip(*np.nonzero(differ), strict=True):
        assert mask[y, x] in padded[y:y + 3, x:x + 3], f"{where}: label {mask[y, x]} at {y, x}"





TRANSFORMS = {
    "rrc+flip": [fastloader.RandomResizedCrop(192, scale=(0.25, 1.0)),
                 fastloader.RandomHorizontalFlip()],
    "resize+centercrop+flip": [fastloader.Resize(200), fastloader.CenterCrop((150, 180)),
                               fastloader.RandomHorizontalFlip(p=1.0)],
    "anisotropic resize": [fastloader.Resize((160, 240))],
}


def _batches(dst: Path, backend: str, name: str) -> list[tuple]:
    loader = fastloader.FastLoader(dst, batch_size=8, shuffle=True, seed=SEED, backend=backend,
                                   transforms=TRANSFORMS[name], device="cpu",
                                   fields=["image", "mask", "boxes", "box_labels", "idx"])
    with loader:
        shapes = loader.dataset.shapes
        out = []
        for b, (images, masks, boxes, labels, idx) in enumerate(loader):
            geometry = plan(TRANSFORMS[name], shapes[idx.numpy()], batch_rng(SEED, 0, b, 0))
            out.append((images.numpy(), masks, boxes, labels, idx.numpy(), geometry))
    return out


@pytest.mark.parametrize("backend", ["auto", "pillow"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_mask_labels_agree_with_the_decoded_shapes(shapes_dataset: tuple[Path, list[dict]],
                                                   backend: str, name: str) -> None:
    dst, samples = shapes_dataset
    labelled = 0
    for images, masks, _, _, idx, (crops, flips, size) in _batches(dst, backend, name):
        assert masks.dtype == np.uint8 or str(masks.dtype) == "torch.uint8"
        assert tuple(masks.shape) == (len(images), *size)
        for k, image in enumerate(images):
            mask = masks[k].numpy()
            inside = _inside(mask)
            agree = (palette_classes(image) == mask)[inside].mean()
            assert agree >= 0.98, f"{name}/{backend}: sample {idx[k]}: {agree:.1%} agree"
            reference = _pillow_nearest(samples[idx[k]]["mask"], crops[k], bool(flips[k]), size)
            _check_nearest(mask, reference, f"{name}/{backend}: sample {idx[k]}")
            labelled += int((mask > 0).sum())
    assert labelled > 10_000  # shapes were there to agree with


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_mask_and_boxes_of_a_sample_agree(shapes_dataset: tuple[Path, list[dict]],
                                          backend: str) -> None:
    dst, _ = shapes_dataset
    compared = 0
    for _, masks, boxes, labels, _, _ in _batches(dst, backend, "rrc+flip"):
        for k in range(len(masks)):
            mask = masks[k].numpy()
            for box, label in zip(boxes[k].numpy(), labels[k].tolist(), strict=True):
                if label not in RECTANGLES:
                    continue  # a cropped ellipse's pixels need not fill its clipped box
                rows, cols = np.nonzero(mask == label)
                assert rows.size, f"kept box {box} of label {label} has no mask pixels"
                pixel_box = np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1])
                iou = box_iou(box.astype(np.float64), pixel_box.astype(np.float64))
                assert iou >= 0.9, f"{backend}: box {box} label {label}: IoU {iou:.3f}"
                compared += 1
    assert compared > 20


def test_gpu_transforms_with_masks_are_refused(shapes_dataset: tuple[Path, list[dict]]) -> None:
    dst, _ = shapes_dataset
    with pytest.raises(fastloader.InvalidArgumentError, match="gpu_transforms= with mask"):
        fastloader.FastLoader(dst, device="cpu", fields=["image", "mask"],
                              transforms=TRANSFORMS["rrc+flip"],
                              gpu_transforms=[fastloader.GpuRandomHorizontalFlip()])


def test_a_replaced_sample_brings_its_own_crop_for_its_mask(
        shapes_dataset: tuple[Path, list[dict]]) -> None:
    """on_error="skip" decodes the next record with a crop of its own: its mask row uses it."""
    dst, _ = shapes_dataset
    dataset = damaged(dst, "garbage")
    checked = 0
    with dataset, fastloader.FastLoader(
            dataset, batch_size=8, seed=5, on_error="skip", device="cpu",
            transforms=TRANSFORMS["rrc+flip"], fields=["image", "mask", "idx"]) as loader:
        for images, masks, idx in loader:
            for k in np.nonzero(idx.numpy() == BAD + 1)[0].tolist():  # the replacement (twice)
                mask = masks[k].numpy()
                agree = (palette_classes(images[k].numpy()) == mask)[_inside(mask)].mean()
                assert agree >= 0.98, f"the replacement's mask agrees on {agree:.1%}"
                checked += 1
        assert loader.stats().skipped == 1
    assert checked == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_masks_on_cuda_are_the_cpu_loaders_masks(shapes_dataset: tuple[Path, list[dict]]
                                                 ) -> None:
    """device="cuda": the masks come from page-locked batches by a non_blocking copy."""
    dst, _ = shapes_dataset
    got = batches_on_devices(dst, ("cpu", "cuda"), batch_size=8, shuffle=True, seed=SEED,
                             transforms=TRANSFORMS["rrc+flip"], fields=["mask", "idx"])
    for (cpu, cpu_idx), (cuda, cuda_idx) in zip(got["cpu"], got["cuda"], strict=True):
        assert cuda.is_cuda and cuda.dtype == torch.uint8
        assert torch.equal(cpu, cuda.cpu()) and torch.equal(cpu_idx, cuda_idx.cpu())
