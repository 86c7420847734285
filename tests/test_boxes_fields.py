"""The boxes field kind: declaring it, packing it (bad boxes refused), the mapping arithmetic,
and the loader options around it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fastloader
from fastloader.decode.boxes import check_min_visibility, map_boxes
from fastloader.errors import InvalidArgumentError, InvalidTypeError, PackError
from fastloader.format.fields import parse_fields
from helpers import png_bytes
from imagegen import encode

FIELDS = {"image": "image", "boxes": ("boxes", ["box_labels", "iscrowd"]),
          "box_labels": ("ndarray", "int64", (-1,)), "iscrowd": ("ndarray", "uint8", (-1,))}


def _samples(n: int = 6) -> list[dict[str, Any]]:
    """32x32 PNGs, sample i with i % 3 boxes."""
    out = []
    for i in range(n):
        k = i % 3
        boxes = np.array([[2 + j, 3, 12 + j, 20] for j in range(k)], np.float32).reshape(-1, 4)
        out.append({"image": png_bytes(i), "boxes": boxes,
                    "box_labels": np.arange(k, dtype=np.int64), "iscrowd": np.zeros(k, np.uint8)})
    return out


def test_map_boxes_scales_flips_clips_and_drops() -> None:
    boxes = np.array([[10, 10, 30, 20],    # inside the crop
                      [0, 12, 20, 30],     # half outside on the left: clipped, 50% visible
                      [0, 12, 13, 30],     # 23% visible: dropped at 0.25
                      [100, 100, 120, 120]], np.float32)  # outside
    crop = np.array([10, 10, 40, 80])  # top, left, height, width -> output (20, 40): scale 0.5
    mapped, keep = map_boxes(boxes, crop, False, (20, 40), 0.25)
    assert keep.tolist() == [True, True, False, False]
    np.testing.assert_allclose(mapped, [[0, 0, 10, 5], [0, 1, 5, 10]])
    flipped, keep = map_boxes(boxes, crop, True, (20, 40), 0.25)
    np.testing.assert_allclose(flipped, [[30, 0, 40, 5], [35, 1, 40, 10]])
    _, keep = map_boxes(boxes, crop, False, (20, 40), 0.0)
    assert keep.tolist() == [True, True, True, False]  # 0 keeps any visible box, never none
    empty, keep = map_boxes(np.zeros((0, 4), np.float32), crop, False, (20, 40), 0.25)
    assert empty.shape == (0, 4) and empty.dtype == np.float32 and keep.shape == (0,)


@pytest.mark.parametrize("value, error", [(-0.1, InvalidArgumentError),
                                          (1.5, InvalidArgumentError),
                                          ("0.3", InvalidTypeError), (True, InvalidTypeError)])
def test_min_box_visibility_is_checked(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="min_box_visibility"):
        check_min_visibility(value)


@pytest.mark.parametrize("fields, message", [
    ({"image": "image", "boxes": ("boxes", ["nope"])}, "per-box field 'nope'"),
    ({"image": "image", "boxes": ("boxes", ["n"]), "n": "int"}, "per-box field 'n'"),
    ({"image": "image", "boxes": ("boxes", ["n"]), "n": ("ndarray", "int64", (3,))},
     "variable in its first"),
    ({"image": "image", "a": ("boxes", ["n"]), "b": ("boxes", ["n"]),
      "n": ("ndarray", "int64", (-1,))}, "per-box of both"),
    ({"image": "image", "boxes": ("boxes", "n")}, "not a list of field names"),
])
def test_bad_per_box_declarations_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_fields(fields)


def test_boxes_round_trip_through_the_manifest(tmp_path: Path) -> None:
    fastloader.pack(_samples(), tmp_path / "d.lmdb", fields=FIELDS, workers=1)
    with fastloader.open_dataset(tmp_path / "d.lmdb") as ds:
        spec = ds.fields["boxes"]
        assert (spec.kind, spec.dtype, spec.shape) == ("boxes", "float32", (-1, 4))
        assert spec.per_box == ("box_labels", "iscrowd")
        sample = ds.sample(2)
        assert sample["boxes"].dtype == np.float32 and sample["boxes"].shape == (2, 4)
        assert ds.sample(0)["boxes"].shape == (0, 4)


@pytest.mark.parametrize("change, message", [
    ({"boxes": [[5, 5, 5, 9]]}, r"box 0 is \[5.0, 5.0, 5.0, 9.0\].*x2 > x1"),
    ({"boxes": [[1, 1, 4, 4], [1, np.nan, 3, 3]]}, "box 1 is"),
    ({"boxes": [[1, 2, 3]]}, "shape"),
    ({"box_labels": np.array([0, 1, 2])}, "'box_labels' has 3 rows but 'boxes' has 1 boxes"),
])
def test_bad_boxes_stop_the_pack_naming_sample_and_box(tmp_path: Path, change: dict,
                                                       message: str) -> None:
    samples = _samples()
    samples[1] = dict(samples[1], **change)
    with pytest.raises(PackError, match=message) as caught:
        fastloader.pack(samples, tmp_path / "x.lmdb", fields=FIELDS, workers=1)
    assert "sample 1" in str(caught.value)
    manifest = fastloader.pack(samples, tmp_path / "x.lmdb", fields=FIELDS, workers=1,
                               skip_bad=True)
    assert manifest.num_samples == 5


def test_per_box_fields_drop_with_their_boxes(tmp_path: Path) -> None:
    square = encode(np.random.default_rng(0).integers(0, 256, (32, 32, 3), np.uint8), "PNG")
    samples = [{"image": square, "boxes": np.array([[0, 0, 10, 10], [20, 20, 32, 32],
                                                          [24, 0, 32, 4]], np.float32),
                "box_labels": np.array([7, 8, 9]), "iscrowd": np.array([0, 1, 0], np.uint8)}]
    fastloader.pack(samples, tmp_path / "d.lmdb", fields=FIELDS, workers=1)
    # CenterCrop(16) of 32x32 keeps rows/cols 8..24: box 0 is 2x2 of 10x10 visible (4%),
    # box 1 4x4 of 12x12 (11%), box 2 none
    with fastloader.FastLoader(tmp_path / "d.lmdb", transforms=[fastloader.CenterCrop(16)],
                               device="cpu", fields=["boxes", "box_labels", "iscrowd"],
                               min_box_visibility=0.1) as loader:
        boxes, labels, crowd = next(iter(loader))
    np.testing.assert_allclose(boxes[0].numpy(), [[12, 12, 16, 16]])
    assert labels[0].tolist() == [8] and crowd[0].tolist() == [1]
    with fastloader.FastLoader(tmp_path / "d.lmdb", transforms=[fastloader.CenterCrop(16)],
                               device="cpu", fields=["box_labels"], padded=True,
                               min_box_visibility=0.0) as loader:
        (values, lengths), = next(iter(loader))
    assert values.tolist() == [[7, 8]] and lengths.tolist() == [2]  # box 2 has no area inside


def test_gpu_transforms_with_boxes_are_refused(tmp_path: Path) -> None:
    fastloader.pack(_samples(2), tmp_path / "d.lmdb", fields=FIELDS, workers=1)
    with pytest.raises(InvalidArgumentError, match="gpu_transforms= with boxes"):
        fastloader.FastLoader(tmp_path / "d.lmdb", device="cpu", fields=["image", "boxes"],
                              gpu_transforms=[fastloader.GpuRandomHorizontalFlip()])


def test_one_copy_to_a_device_keeps_every_samples_values_shape_and_dtype() -> None:
    # the CUDA path of arrays_to_device (flatten, one copy, split, view), run to the CPU here
    from fastloader.format.kinds.device import _one_copy, arrays_to_device

    rng = np.random.default_rng(0)
    arrays = [rng.random((k, 4)).astype(np.float32) for k in (3, 0, 1, 5)]
    labels = [rng.integers(0, 9, k) for k in (3, 0, 1, 5)]
    for batch in (arrays, labels):
        moved = _one_copy(batch, torch.device("cpu"))
        assert [tuple(t.shape) for t in moved] == [a.shape for a in batch]
        assert all(t.dtype == torch.from_numpy(a).dtype for t, a in zip(moved, batch, strict=True))
        assert all(np.array_equal(t.numpy(), a) for t, a in zip(moved, batch, strict=True))
    readonly = np.arange(6.0).reshape(3, 2)
    readonly.flags.writeable = False  # a memory-mapped column's slice
    (wrapped,) = arrays_to_device([readonly], torch.device("cpu"))
    assert wrapped.tolist() == readonly.tolist()
