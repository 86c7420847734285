"""RandomIoUCrop: every crop it keeps has a box that meets the drawn threshold, every sample
that had boxes keeps at least one in the batch, the crops are reproducible from (seed, epoch,
batch, rank) and independent of the thread count, and bad arguments are refused.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import fastloader
from fastloader.decode.augment import batch_rng, check_transforms, plan_geometry
from fastloader.errors import InvalidArgumentError, InvalidTypeError

BACKGROUND = (128, 128, 128)
COLOURS = [(255, 0, 0), (0, 200, 0), (0, 0, 255), (255, 255, 0)]
PALETTE = np.array([BACKGROUND, *COLOURS], np.float32)
FIELDS = {"image": "image", "boxes": ("boxes", ["box_labels"]),
          "box_labels": ("ndarray", "int64", (-1,)), "idx": "int"}


def _random_boxes(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    count = int(rng.integers(0, 4))  # some samples have no boxes
    x1 = rng.uniform(0, width * 0.8, count)
    y1 = rng.uniform(0, height * 0.8, count)
    x2 = np.minimum(x1 + rng.uniform(8, width * 0.5, count), width)
    y2 = np.minimum(y1 + rng.uniform(8, height * 0.5, count), height)
    return np.stack([x1, y1, x2, y2], axis=1).reshape(-1, 4)


def _score(box: np.ndarray, crop: np.ndarray, criterion: str) -> float:
    """box (XYXY) against crop (top, left, height, width): -1 when its centre is outside."""
    top, left, height, width = (float(v) for v in crop)
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    if not (left < cx < left + width and top < cy < top + height):
        return -1.0
    iw = max(0.0, min(left + width, box[2]) - max(left, box[0]))
    ih = max(0.0, min(top + height, box[3]) - max(top, box[1]))
    area = (box[2] - box[0]) * (box[3] - box[1])
    union = area if criterion == "visibility" else width * height + area - iw * ih
    return iw * ih / union


@pytest.mark.parametrize("criterion", ["iou", "visibility"])
def test_every_kept_crop_has_a_box_over_the_threshold(criterion: str) -> None:
    rng = np.random.default_rng(7)
    shapes = rng.integers(100, 400, size=(256, 2))
    boxes = [_random_boxes(rng, int(h), int(w)) for h, w in shapes]
    op = fastloader.RandomIoUCrop(options=(0.5,), criterion=criterion)
    geometry = plan_geometry(check_transforms([op, fastloader.Resize((64, 64))]), shapes,
                             np.random.default_rng(1), boxes)
    cropped = 0
    for k, crop in enumerate(geometry.crops):
        whole = (crop == [0, 0, *shapes[k]]).all()
        if not whole:
            cropped += 1
            if len(boxes[k]):
                best = max(_score(box, crop, criterion) for box in boxes[k])
                assert best >= 0.5, f"sample {k}: crop {crop} keeps no box at 0.5 ({best:.2f})"
            h, w = crop[2:]
            assert 0.3 * shapes[k][0] - 1 <= h <= shapes[k][0]
            assert 0.3 * shapes[k][1] - 1 <= w <= shapes[k][1]
            assert 0.5 <= w / h <= 2.0
    assert cropped > len(shapes) // 5, "almost every sample fell back: the test checks nothing"


def test_the_none_option_keeps_the_image_whole_and_no_qualifying_crop_falls_back() -> None:
    shapes = np.array([[200, 300]] * 8)
    tiny = [np.array([[0.0, 0.0, 2.0, 2.0]])] * 8  # IoU >= 0.9 with a >= 30% crop: impossible
    for options in ((None,), (0.9,)):
        op = fastloader.RandomIoUCrop(options=options, trials=5)
        geometry = plan_geometry(check_transforms([op, fastloader.Resize((32, 32))]), shapes,
                                 np.random.default_rng(0), tiny)
        assert (geometry.crops == [0, 0, 200, 300]).all(), options


def test_plans_are_reproducible_and_need_boxes() -> None:
    rng = np.random.default_rng(3)
    shapes = rng.integers(100, 300, size=(32, 2))
    boxes = [_random_boxes(rng, int(h), int(w)) for h, w in shapes]
    transforms = check_transforms([fastloader.RandomIoUCrop(), fastloader.ResizeFit(64),
                                   fastloader.RandomHorizontalFlip()])
    first = plan_geometry(transforms, shapes, batch_rng(1, 2, 3, 0), boxes)
    again = plan_geometry(transforms, shapes, batch_rng(1, 2, 3, 0), boxes)
    other = plan_geometry(transforms, shapes, batch_rng(1, 2, 4, 0), boxes)
    assert np.array_equal(first.crops, again.crops) and np.array_equal(first.flips, again.flips)
    assert np.array_equal(first.places, again.places)
    assert not np.array_equal(first.crops, other.crops)
    with pytest.raises(InvalidArgumentError, match="RandomIoUCrop plans from each sample"):
        plan_geometry(transforms, shapes, batch_rng(1, 2, 3, 0))


def _photo(rng: np.random.Generator, index: int) -> dict[str, object]:
    """A grey photo with up to four coloured rectangles (none in some photos)."""
    height, width = (int(v) for v in rng.integers(200, 300, size=2))
    pixels = np.full((height, width, 3), BACKGROUND, np.uint8)
    boxes, labels = [], []
    cell_h, cell_w = height // 2, width // 2
    for cell, label in enumerate(rng.permutation(len(COLOURS)).tolist()):
        if index % 6 == 0 or rng.random() < 0.3:
            continue
        top = (cell // 2) * cell_h + 4 + int(rng.integers(0, 20))
        left = (cell % 2) * cell_w + 4 + int(rng.integers(0, 20))
        box_h, box_w = int(rng.integers(40, cell_h - 28)), int(rng.integers(40, cell_w - 28))
        pixels[top:top + box_h, left:left + box_w] = COLOURS[label]
        boxes.append([left, top, left + box_w, top + box_h])
        labels.append(label)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=95, subsampling=0)
    return {"image": buffer.getvalue(), "boxes": np.array(boxes, np.float32).reshape(-1, 4),
            "box_labels": np.array(labels, np.int64), "idx": index}


@pytest.fixture(scope="module")
def iou_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    rng = np.random.default_rng(19)
    samples = [_photo(rng, i) for i in range(32)]
    dst = tmp_path_factory.mktemp("ioucrop") / "shapes.lmdb"
    fastloader.pack(samples, dst, fields=FIELDS)
    return dst, samples


TRANSFORMS = [fastloader.RandomIoUCrop(options=(None, 0.3, 0.5, 0.7)),
              fastloader.Resize((128, 128)), fastloader.RandomHorizontalFlip()]


def _run(dst: Path, threads: int, backend: str = "auto") -> list[tuple]:
    with fastloader.FastLoader(dst, batch_size=8, shuffle=True, seed=11, device="cpu",
                               num_threads=threads, backend=backend, transforms=TRANSFORMS,
                               fields=["image", "boxes", "box_labels", "idx"]) as loader:
        return [loader_batch for _ in range(2) for loader_batch in loader]


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_the_loader_keeps_a_box_in_every_sample_that_had_one(
        iou_dataset: tuple[Path, list[dict]], backend: str) -> None:
    dst, samples = iou_dataset
    checked = 0
    for images, boxes, labels, idx in _run(dst, 2, backend):
        for k, image in enumerate(images.numpy()):
            if len(samples[int(idx[k])]["boxes"]):
                assert len(boxes[k]) >= 1, f"sample {int(idx[k])} lost every box"
            else:
                assert len(boxes[k]) == 0
            classes = np.argmin(((image.transpose(1, 2, 0)[:, :, None, :].astype(np.float32)
                                  - PALETTE) ** 2).sum(-1), axis=-1)
            for box, label in zip(boxes[k].numpy(), labels[k].tolist(), strict=True):
                rows, cols = np.nonzero(classes == 1 + label)
                pixel = np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1])
                inter = np.prod(np.clip(np.minimum(box[2:], pixel[2:])
                                        - np.maximum(box[:2], pixel[:2]), 0, None))
                union = np.prod(box[2:] - box[:2]) + np.prod(pixel[2:] - pixel[:2]) - inter
                assert inter / union >= 0.9, f"box {box} label {label}"
                checked += 1
    assert checked > 50


def test_the_loader_gives_the_same_batches_for_any_thread_count(
        iou_dataset: tuple[Path, list[dict]]) -> None:
    dst, _ = iou_dataset
    one, two = _run(dst, 1), _run(dst, 2)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[3], b[3])
        assert all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))


def test_a_dataset_without_boxes_is_refused(tmp_path: Path) -> None:
    samples = [{"image": _photo(np.random.default_rng(i), 1)["image"], "idx": i}
               for i in range(2)]
    dst = tmp_path / "plain.lmdb"
    fastloader.pack(samples, dst, fields={"image": "image", "idx": "int"})
    with pytest.raises(InvalidArgumentError, match="has no boxes field"):
        fastloader.FastLoader(dst, device="cpu", transforms=[fastloader.RandomIoUCrop(),
                                                             fastloader.Resize((32, 32))])


def test_an_unknown_boxes_field_is_refused(iou_dataset: tuple[Path, list[dict]]) -> None:
    with pytest.raises(InvalidArgumentError, match="no boxes field of that name"):
        fastloader.FastLoader(iou_dataset[0], device="cpu",
                              transforms=[fastloader.RandomIoUCrop(field="nope"),
                                          fastloader.Resize((32, 32))])


def test_a_crop_without_a_sizing_transform_after_it_is_refused(
        iou_dataset: tuple[Path, list[dict]]) -> None:
    with pytest.raises(InvalidArgumentError, match="follow it with ResizeFit"):
        fastloader.FastLoader(iou_dataset[0], device="cpu",
                              transforms=[fastloader.RandomIoUCrop(options=(0.1,))])


@pytest.mark.parametrize("kwargs, error, message", [
    ({"min_scale": 0.0}, InvalidArgumentError, "0 < low <= high"),
    ({"max_scale": 1.5}, InvalidArgumentError, "cannot exceed"),
    ({"min_scale": 0.8, "max_scale": 0.5}, InvalidArgumentError, "0 < low <= high"),
    ({"min_aspect_ratio": 3.0}, InvalidArgumentError, "0 < low <= high"),
    ({"options": ()}, InvalidTypeError, "non-empty"),
    ({"options": (0.5, 1.5)}, InvalidArgumentError, "None .no crop. or a number"),
    ({"options": "0.5"}, InvalidTypeError, "non-empty"),
    ({"trials": 0}, InvalidArgumentError, r"\[1, 1000\]"),
    ({"criterion": "dice"}, InvalidArgumentError, "criterion"),
    ({"field": 3}, InvalidTypeError, "field name"),
])
def test_bad_arguments_are_refused(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        fastloader.RandomIoUCrop(**kwargs)
