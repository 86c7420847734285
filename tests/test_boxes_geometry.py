"""Boxes follow the fused crop: generated photos with coloured rectangles at known boxes.

After random crops, resizes and flips every kept output box must bound its rectangle's pixels
in the decoded output (IoU >= 0.9), and every dropped box must be mostly outside the output.
Runs through the native decode and (backend="pillow", and make test's second run with
FASTLOADER_DISABLE_NATIVE=1) through the Pillow path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import fastloader
from fastloader.decode.augment import batch_rng, plan
from fastloader.decode.boxes import DEFAULT_MIN_BOX_VISIBILITY
from helpers import BAD, batches_on_devices, box_iou, damaged, palette_classes, rectangles_photo

FIELDS = {"image": "image", "boxes": ("boxes", ["box_labels"]),
          "box_labels": ("ndarray", "int64", (-1,)), "idx": "int"}


@pytest.fixture(scope="module")
def shapes_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    rng = np.random.default_rng(18)
    samples = [rectangles_photo(rng, i, skip=0.15) for i in range(48)]
    dst = tmp_path_factory.mktemp("boxes") / "shapes.lmdb"
    fastloader.pack(samples, dst, fields=FIELDS)
    return dst, samples


def _pixel_box(mask: np.ndarray) -> np.ndarray:
    rows, cols = np.nonzero(mask)
    return np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1], np.float64)





TRANSFORMS = {
    "rrc+flip": [fastloader.RandomResizedCrop(192, scale=(0.25, 1.0)),
                 fastloader.RandomHorizontalFlip()],
    "resize+centercrop+flip": [fastloader.Resize(200), fastloader.CenterCrop((150, 180)),
                               fastloader.RandomHorizontalFlip(p=1.0)],
    "anisotropic resize": [fastloader.Resize((160, 240))],
}


@pytest.mark.parametrize("backend", ["auto", "pillow"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_kept_boxes_bound_their_shapes_and_dropped_ones_are_outside(
        shapes_dataset: tuple[Path, list[dict]], backend: str, name: str) -> None:
    dst, samples = shapes_dataset
    loader = fastloader.FastLoader(dst, batch_size=8, shuffle=True, seed=3, backend=backend,
                                   transforms=TRANSFORMS[name], device="cpu",
                                   fields=["image", "boxes", "box_labels", "idx"])
    kept = dropped = 0
    with loader:
        shapes = loader.dataset.shapes
        for b, (images, boxes, labels, idx) in enumerate(loader):
            assert len(boxes) == len(labels) == len(images) == len(idx)
            # the crop plan only gives each source box's full output area (its scale); whether
            # a box is visible is read from the decoded pixels
            crops, _, (out_h, out_w) = plan(TRANSFORMS[name], shapes[idx.numpy()],
                                            batch_rng(3, 0, b, 0))
            for k, image in enumerate(images.numpy()):
                assert boxes[k].dtype == torch.float32 and boxes[k].shape[1:] == (4,)
                assert len(boxes[k]) == len(labels[k])
                classes = palette_classes(image)
                for box, label in zip(boxes[k].numpy(), labels[k].tolist(), strict=True):
                    mask = classes == 1 + label
                    assert mask.any(), f"kept box {box} of label {label} has no pixels"
                    iou = box_iou(box.astype(np.float64), _pixel_box(mask))
                    assert iou >= 0.9, f"{name}/{backend}: box {box} label {label}: IoU {iou:.3f}"
                    kept += 1
                sample = samples[int(idx[k])]
                scale = (out_h / crops[k][2]) * (out_w / crops[k][3])
                dropped += _check_visibility(classes, sample, set(labels[k].tolist()), scale)
    assert kept > 40
    if name == "rrc+flip":
        assert dropped > 0, "no box was ever dropped: the drop rule went untested"


def _check_visibility(classes: np.ndarray, sample: dict, kept: set[int], scale: float) -> int:
    """Boxes well above min visibility in the pixels are kept, well below are dropped."""
    dropped = 0
    for box, label in zip(sample["boxes"], sample["box_labels"].tolist(), strict=True):
        full = float((box[2] - box[0]) * (box[3] - box[1])) * scale
        visible = float((classes == 1 + label).sum()) / full
        if visible > DEFAULT_MIN_BOX_VISIBILITY + 0.1:
            assert label in kept, f"label {label} {visible:.0%} visible was dropped"
        if visible < DEFAULT_MIN_BOX_VISIBILITY - 0.1:
            assert label not in kept, f"label {label} {visible:.0%} visible was kept"
        dropped += label not in kept
    return dropped


def test_a_replaced_sample_brings_its_own_crop_for_its_boxes(
        shapes_dataset: tuple[Path, list[dict]]) -> None:
    """on_error="skip" decodes the next record with a crop of its own: its boxes use that one."""
    dst, _ = shapes_dataset
    dataset = damaged(dst, "garbage")
    checked = 0
    with dataset, fastloader.FastLoader(
            dataset, batch_size=8, seed=5, on_error="skip", device="cpu",
            transforms=TRANSFORMS["rrc+flip"], fields=["image", "boxes", "box_labels", "idx"],
            min_box_visibility=0.5) as loader:
        for images, boxes, labels, idx in loader:
            for k in np.nonzero(idx.numpy() == BAD + 1)[0].tolist():  # the replacement (twice)
                classes = palette_classes(images[k].numpy())
                assert len(boxes[k]), "the replacement's boxes were all dropped"
                for box, label in zip(boxes[k].numpy(), labels[k].tolist(), strict=True):
                    iou = box_iou(box.astype(np.float64), _pixel_box(classes == 1 + label))
                    assert iou >= 0.9, f"replacement box {box} label {label}: IoU {iou:.3f}"
                    checked += 1
        assert loader.stats().skipped == 1
    assert checked >= 3


def test_default_min_visibility_is_the_documented_one() -> None:
    assert DEFAULT_MIN_BOX_VISIBILITY == 0.25


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_boxes_on_cuda_are_the_cpu_loaders_boxes(shapes_dataset: tuple[Path, list[dict]]
                                                 ) -> None:
    """device="cuda": a batch's boxes go over in one non_blocking copy, split per sample."""
    dst, _ = shapes_dataset
    got = batches_on_devices(dst, ("cpu", "cuda"), batch_size=8, shuffle=True, seed=4,
                             transforms=TRANSFORMS["rrc+flip"], fields=["boxes", "box_labels"])
    for (cpu, cpu_labels), (cuda, cuda_labels) in zip(got["cpu"], got["cuda"], strict=True):
        assert len(cpu) == len(cuda) and all(b.is_cuda for b in cuda)
        for a, b in zip(cpu, cuda, strict=True):
            assert torch.equal(a, b.cpu())
        for a, b in zip(cpu_labels, cuda_labels, strict=True):
            assert torch.equal(a, torch.as_tensor(b).cpu())
