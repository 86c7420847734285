"""ResizeFit (letterbox): generated photos with coloured rectangles at known boxes, of varied
aspect. After ResizeFit every box still bounds its rectangle's pixels (IoU >= 0.9), the padding
is exactly the fill value, and the batch's scale/pad map the boxes back to the source within a
pixel. Through the native decode and the Pillow path (backend="pillow"; make test's second run
with FASTLOADER_DISABLE_NATIVE=1 takes the Pillow path for "auto" too), same geometry in both.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import fastloader
from fastloader.decode.decode import BatchDecoder
from fastloader.errors import InvalidArgumentError, InvalidTypeError
from helpers import BAD, box_iou, damaged, palette_classes, rectangles_photo

FIELDS = {"image": "image", "boxes": ("boxes", ["box_labels"]),
          "box_labels": ("ndarray", "int64", (-1,)), "idx": "int"}
FILL = 37
SIDE = 192


@pytest.fixture(scope="module")
def letterbox_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    rng = np.random.default_rng(181)
    samples = [rectangles_photo(rng, i, sides=(150, 331), min_box=50) for i in range(24)]
    dst = tmp_path_factory.mktemp("letterbox") / "shapes.lmdb"
    fastloader.pack(samples, dst, fields=FIELDS)
    return dst, samples


def _batches(dst: Path, backend: str, transforms: list) -> list[dict]:
    with fastloader.FastLoader(dst, batch_size=8, seed=4, backend=backend, device="cpu",
                               transforms=transforms) as loader:
        return list(loader)


@pytest.mark.parametrize("backend", ["auto", "pillow"])
@pytest.mark.parametrize("position", ["center", "top-left"])
def test_boxes_bound_their_shapes_and_the_padding_is_the_fill(
        letterbox_dataset: tuple[Path, list[dict]], backend: str, position: str) -> None:
    dst, samples = letterbox_dataset
    checked = 0
    transforms = [fastloader.ResizeFit(SIDE, fill=FILL, position=position),
                  fastloader.RandomHorizontalFlip()]
    for batch in _batches(dst, backend, transforms):
        assert batch["image"].shape[1:] == (3, SIDE, SIDE)
        assert batch["scale"].dtype == torch.float32 and batch["scale"].shape[1:] == (2,)
        assert batch["pad"].dtype == torch.int64 and batch["pad"].shape[1:] == (4,)
        for k, image in enumerate(batch["image"].numpy()):
            left, top, right, bottom = batch["pad"][k].tolist()
            inner_h, inner_w = SIDE - top - bottom, SIDE - left - right
            assert max(inner_h, inner_w) == SIDE and min(inner_h, inner_w) >= 1
            if position == "top-left":
                assert left == top == 0
            else:
                assert abs(left - right) <= 1 and abs(top - bottom) <= 1
            outside = np.ones((SIDE, SIDE), bool)
            outside[top:top + inner_h, left:left + inner_w] = False
            assert (image[:, outside] == FILL).all(), "the padding is not the fill value"
            assert outside.sum() == 0 or not (image[:, ~outside] == FILL).all()
            source = samples[int(batch["idx"][k])]
            assert len(batch["boxes"][k]) == len(source["boxes"]), "a fully visible box dropped"
            classes = palette_classes(image)
            for box, label in zip(batch["boxes"][k].numpy(), batch["box_labels"][k].tolist(),
                                  strict=True):
                rows, cols = np.nonzero(classes == 1 + label)
                pixel_box = np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1])
                iou = box_iou(box.astype(np.float64), pixel_box.astype(np.float64))
                assert iou >= 0.9, f"{backend}/{position}: box {box} label {label}: IoU {iou:.3f}"
                checked += 1
    assert checked == 4 * len(samples)


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_scale_and_pad_map_boxes_back_to_the_source(
        letterbox_dataset: tuple[Path, list[dict]], backend: str) -> None:
    dst, samples = letterbox_dataset
    for batch in _batches(dst, backend, [fastloader.ResizeFit(SIDE, fill=FILL)]):
        for k in range(len(batch["idx"])):
            scale = batch["scale"][k].numpy().astype(np.float64)
            origin = batch["pad"][k, :2].numpy().astype(np.float64)  # left, top
            back = (batch["boxes"][k].numpy() - np.tile(origin, 2)) / np.tile(scale, 2)
            source = samples[int(batch["idx"][k])]["boxes"]
            assert np.abs(back - source).max() <= 1.0, f"sample {int(batch['idx'][k])}"


@pytest.mark.native
def test_native_and_pillow_give_the_same_geometry(
        letterbox_dataset: tuple[Path, list[dict]]) -> None:
    if not fastloader.native_available():
        pytest.skip("the native extension is not built (FASTLOADER_DISABLE_NATIVE=1)")
    dst, _ = letterbox_dataset
    transforms = [fastloader.ResizeFit(SIDE, fill=FILL), fastloader.RandomHorizontalFlip()]
    native, pillow = _batches(dst, "native", transforms), _batches(dst, "pillow", transforms)
    for a, b in zip(native, pillow, strict=True):
        for key in ("idx", "scale", "pad"):
            assert torch.equal(a[key], b[key]), key
        for boxes_a, boxes_b in zip(a["boxes"], b["boxes"], strict=True):
            assert torch.equal(boxes_a, boxes_b)
        # the placement is exact in both; pixels inside differ by the resampling's rounding
        assert (a["image"].int() - b["image"].int()).abs().float().mean() < 2.0


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])  # PNG: the native path's Pillow fallback
@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_the_decoder_writes_into_the_place_and_fills_the_rest(backend: str, fmt: str) -> None:
    pixels = np.zeros((40, 60, 3), np.uint8)
    pixels[:, :30] = (250, 10, 10)
    buffer = io.BytesIO()
    options = {"quality": 95, "subsampling": 0} if fmt == "JPEG" else {}
    Image.fromarray(pixels).save(buffer, fmt, **options)
    out = np.zeros((1, 50, 50, 3), np.uint8)
    with BatchDecoder(1, backend) as decoder:
        errors = decoder.decode_into([buffer.getvalue()], [[0, 0, 40, 60]], [True], out,
                                     places=[[10, 5, 20, 30]], fill=9)
    assert errors == [None]
    inside = np.zeros((50, 50), bool)
    inside[10:30, 5:35] = True
    assert (out[0][~inside] == 9).all()
    image = out[0, 10:30, 5:35].astype(int)
    assert image[:, :14, 0].min() < 40 and image[:, 16:, 0].min() > 200  # mirrored inside


@pytest.mark.parametrize("places, fill, message", [
    ([[0, 0, 51, 10]], 0, "inside"), ([[-1, 0, 5, 5]], 0, "inside"), ([[0, 0, 0, 5]], 0, "inside"),
    ([[0, 0, 5]], 0, "shape"), ([[0, 0, 5, 5]], 256, "fill"), ([[0, 0, 5, 5]], True, "fill")])
def test_bad_places_and_fill_are_refused(places: list, fill: object, message: str) -> None:
    out = np.zeros((1, 50, 50, 3), np.uint8)
    with BatchDecoder(1) as decoder, pytest.raises(InvalidArgumentError, match=message):
        decoder.decode_into([b"\xff\xd8"], [[0, 0, 0, 0]], [False], out, places=places,
                            fill=fill)


def test_bad_resize_fit_arguments_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="positive"):
        fastloader.ResizeFit(0)
    with pytest.raises(InvalidTypeError, match="an int"):
        fastloader.ResizeFit(1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"\[0, 255\]"):
        fastloader.ResizeFit(64, fill=300)
    with pytest.raises(InvalidArgumentError, match="position"):
        fastloader.ResizeFit(64, position="middle")


def test_only_a_flip_may_follow_resize_fit(letterbox_dataset: tuple[Path, list[dict]]) -> None:
    dst, _ = letterbox_dataset
    with pytest.raises(InvalidArgumentError, match="only RandomHorizontalFlip may follow"):
        fastloader.FastLoader(dst, device="cpu", transforms=[fastloader.ResizeFit(64),
                                                             fastloader.CenterCrop(32)])


def test_the_device_ops_refuse_resize_fit() -> None:
    from fastloader.gpu.ops import GpuGeometry

    with pytest.raises(InvalidArgumentError, match="ResizeFit is not supported by the device"):
        GpuGeometry([fastloader.ResizeFit(64)])


@pytest.mark.parametrize("transforms", [
    [fastloader.ResizeFit(64)], [fastloader.RandomIoUCrop(), fastloader.Resize((32, 32))]])
def test_the_dali_backend_refuses_the_detection_transforms_naming_the_native_one(
        letterbox_dataset: tuple[Path, list[dict]], transforms: list) -> None:
    from fastloader.loader.dali.pipeline import dali_available

    if not dali_available():
        pytest.skip('NVIDIA DALI is not importable here: pip install "fastloader[dali]"')
    with pytest.raises(InvalidArgumentError, match=r"not supported by backend=\"dali\".*native"):
        fastloader.FastLoader(letterbox_dataset[0], backend="dali", device="cpu",
                              transforms=transforms)


def test_a_replaced_sample_is_letterboxed_by_its_own_placement(
        letterbox_dataset: tuple[Path, list[dict]]) -> None:
    """on_error="skip" decodes the next record into the bad one's slot: its own shape gives it
    its own rectangle, and its boxes, scale and pad follow that rectangle."""
    dst, samples = letterbox_dataset
    dataset = damaged(dst, "garbage")
    checked = 0
    with dataset, fastloader.FastLoader(
            dataset, batch_size=8, seed=5, on_error="skip", device="cpu",
            transforms=[fastloader.ResizeFit(SIDE, fill=FILL)]) as loader:
        for batch in loader:
            for k in np.nonzero(batch["idx"].numpy() == BAD + 1)[0].tolist():
                left, top, right, bottom = batch["pad"][k].tolist()
                image = batch["image"][k].numpy()
                assert (image[:, :top] == FILL).all() and (image[:, SIDE - bottom:] == FILL).all()
                assert (image[:, :, :left] == FILL).all()
                assert (image[:, :, SIDE - right:] == FILL).all()
                back = ((batch["boxes"][k].numpy() - [left, top, left, top])
                        / np.tile(batch["scale"][k].numpy(), 2))
                assert np.abs(back - samples[BAD + 1]["boxes"]).max() <= 1.0
                classes = palette_classes(image)  # and the boxes bound the pixels actually decoded
                for box, label in zip(batch["boxes"][k].numpy(),
                                      batch["box_labels"][k].tolist(), strict=True):
                    rows, cols = np.nonzero(classes == 1 + label)
                    pixel_box = np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1])
                    assert box_iou(box.astype(np.float64), pixel_box.astype(np.float64)) >= 0.9
                checked += 1
        assert loader.stats().skipped == 1
    assert checked == 2  # the bad sample's replacement, and the record itself in its place
