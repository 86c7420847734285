"""The mask field kind: packing it (arrays, PNG bytes, PNG paths), its stored form, bad masks
refused naming the sample and field, verify's check, and the nearest-neighbour mapping."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import fastloader
from fastloader.decode import _native
from fastloader.decode.masks import map_mask, map_runs
from fastloader.errors import CorruptRecordError, PackError
from fastloader.format.masks import MaskError, decode_mask, encode_mask, mask_runs
from fastloader.pack.maintain.verify import verify
from imagegen import encode

FIELDS = {"image": "image", "mask": "mask"}
HEIGHT, WIDTH = 40, 56


def _mask(seed: int, height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    """A label image: two rectangles of labels 1 + seed % 5 and 7 on background 0."""
    mask = np.zeros((height, width), np.uint8)
    mask[5:20, 4:30] = 1 + seed % 5
    mask[22:38, 30:50] = 7
    return mask


def _png(array: np.ndarray, mode: str | None = None) -> bytes:
    buffer = io.BytesIO()
    image = Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _image(seed: int, height: int = HEIGHT, width: int = WIDTH) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)
    return encode(pixels, "JPEG")


def _samples(tmp_path: Path, n: int = 6) -> list[dict[str, Any]]:
    """Masks as arrays, PNG bytes (grey and palette) and PNG paths, in turn."""
    samples = []
    for i in range(n):
        mask: Any = _mask(i)
        if i % 4 == 1:
            mask = _png(mask)
        elif i % 4 == 2:
            image = Image.fromarray(mask, "L").convert("P")  # palette indices are the labels
            image.putpalette([v for k in range(256) for v in (k, 255 - k, 0)])
            buffer = io.BytesIO()
            image.save(buffer, "PNG")
            mask = buffer.getvalue()
        elif i % 4 == 3:
            path = tmp_path / f"mask{i}.png"
            path.write_bytes(_png(mask))
            mask = str(path)
        samples.append({"image": _image(i), "mask": mask})
    return samples


def test_masks_round_trip_from_arrays_png_bytes_and_paths(tmp_path: Path) -> None:
    fastloader.pack(_samples(tmp_path), tmp_path / "d.lmdb", fields=FIELDS, workers=1)
    manifest = json.loads((tmp_path / "d.lmdb" / "manifest.json").read_text())
    assert {"name": "mask", "kind": "mask"} in manifest["sample_fields"]
    with fastloader.open_dataset(tmp_path / "d.lmdb") as ds:
        assert ds.fields["mask"].kind == "mask"
        for i in range(len(ds)):
            mask = ds.sample(i)["mask"]
            assert mask.dtype == np.uint8 and mask.shape == (HEIGHT, WIDTH)
            np.testing.assert_array_equal(mask, _mask(i))
    report = verify(tmp_path / "d.lmdb")
    assert report.problems == [] and report.values_checked == 6


@pytest.mark.parametrize("mask, message", [
    (np.zeros((HEIGHT, WIDTH + 1), np.uint8), f"is {HEIGHT} x {WIDTH + 1} .* image is {HEIGHT} "
                                              f"x {WIDTH}"),
    (np.zeros((HEIGHT, WIDTH, 3), np.uint8), r"single-channel \[H, W\], got shape"),
    (np.zeros((HEIGHT, WIDTH), np.uint16), "must be uint8"),
    (np.zeros((HEIGHT, WIDTH), np.int64), "must be uint8"),
    (_png(np.zeros((HEIGHT, WIDTH, 3), np.uint8)), "is a RGB image .3 channels"),
    (_png(np.zeros((HEIGHT, WIDTH), np.uint16) + 300), "16- or 32-bit"),
    (b"garbage, not a PNG", "not an image Pillow recognises"),
    (_png(_mask(0))[:60], "does not decode"),
    ("/nonexistent/mask.png", "cannot read"),
    (3, "got int"),
])
def test_bad_masks_stop_the_pack_naming_sample_and_field(tmp_path: Path, mask: Any,
                                                         message: str) -> None:
    samples = _samples(tmp_path, 4)
    samples[2] = dict(samples[2], mask=mask)
    with pytest.raises(PackError, match=message) as caught:
        fastloader.pack(samples, tmp_path / "x.lmdb", fields=FIELDS, workers=1)
    assert "sample 2" in str(caught.value) and "'mask'" in str(caught.value)
    manifest = fastloader.pack(samples, tmp_path / "x.lmdb", fields=FIELDS, workers=1,
                               skip_bad=True)
    assert manifest.num_samples == 3


def test_max_side_resizes_the_mask_with_its_image(tmp_path: Path) -> None:
    mask = np.zeros((80, 120), np.uint8)
    mask[:, 60:] = 3  # the right half
    samples = [{"image": _image(0, 80, 120), "mask": mask}]
    fastloader.pack(samples, tmp_path / "d.lmdb", fields=FIELDS, workers=1, max_side=60)
    with fastloader.open_dataset(tmp_path / "d.lmdb") as ds:
        stored = ds.sample(0)["mask"]
        assert stored.shape == tuple(ds.shapes[0]) == (40, 60)
        assert (stored[:, :30] == 0).all() and (stored[:, 30:] == 3).all()


def _damage_mask(root: Path, sample: int) -> None:
    """Flip bits in a sample's stored runs, past its header; the file's sha256 is rewritten
    so only the value is damaged (what the index checks cannot see)."""
    manifest = json.loads((root / "manifest.json").read_text())
    entry = manifest["fields"]["field.mask.values"]
    values = np.load(root / entry["file"])
    offsets = np.load(root / manifest["fields"]["field.mask.offsets"]["file"])
    values[int(offsets[sample]) + 12:int(offsets[sample + 1])] ^= 0x5A
    np.save(root / entry["file"], values)
    entry["sha256"] = hashlib.sha256((root / entry["file"]).read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_a_damaged_mask_is_named_by_sample_and_field_and_verify_finds_it(
        tmp_path: Path) -> None:
    fastloader.pack(_samples(tmp_path, 3), tmp_path / "d.lmdb", fields=FIELDS, workers=1)
    root = tmp_path / "d.lmdb"
    _damage_mask(root, 1)
    with fastloader.open_dataset(root) as ds:
        ds.sample(0)
        with pytest.raises(CorruptRecordError, match=r"sample 1.*mask field 'mask'"):
            ds.sample(1)
    report = verify(root)
    assert report.bad_records == [1] and "field 'mask'" in report.problems[0]


def test_codec_round_trips_and_refuses_damage() -> None:
    rng = np.random.default_rng(0)
    for mask in (_mask(3), np.zeros((1, 1), np.uint8), rng.integers(0, 256, (31, 17), np.uint8)):
        np.testing.assert_array_equal(decode_mask(encode_mask(mask)), mask)
    blob = encode_mask(_mask(1))
    for bad in (blob[:5], b"XXXX" + blob[4:], blob[:12] + b"junk" + blob[16:]):
        with pytest.raises(MaskError):
            decode_mask(bad)


def test_map_mask_crops_resizes_nearest_and_flips() -> None:
    mask = np.arange(16, dtype=np.uint8).reshape(4, 4)
    crop = np.array([1, 0, 2, 4])  # rows 1..2, all columns; 2 of 4 columns: centres 1, 3
    np.testing.assert_array_equal(map_mask(mask, crop, False, (2, 2)), [[5, 7], [9, 11]])
    np.testing.assert_array_equal(map_mask(mask, crop, True, (2, 2)), [[7, 5], [11, 9]])
    up = map_mask(mask, np.array([0, 0, 2, 2]), False, (4, 4))  # each pixel twice, both ways
    np.testing.assert_array_equal(up, [[0, 0, 1, 1], [0, 0, 1, 1], [4, 4, 5, 5], [4, 4, 5, 5]])
    out = np.empty((3, 4), np.uint8)
    assert map_mask(mask, np.array([0, 0, 4, 4]), True, (3, 4), out) is out
    np.testing.assert_array_equal(out, mask[[0, 2, 3]][:, ::-1])  # centres 0.67, 2, 3.33


def test_the_loader_names_a_damaged_mask_and_a_mask_of_the_wrong_size(tmp_path: Path) -> None:
    fastloader.pack(_samples(tmp_path, 4), tmp_path / "d.lmdb", fields=FIELDS, workers=1)
    _damage_mask(tmp_path / "d.lmdb", 2)
    with fastloader.FastLoader(tmp_path / "d.lmdb", batch_size=4, device="cpu",
                               fields=["image", "mask"],
                               transforms=[fastloader.CenterCrop(32)]) as loader, \
            pytest.raises(CorruptRecordError, match=r"sample 2.*mask field 'mask'.*'masks'"):
        next(iter(loader))


@pytest.mark.native
def test_native_runs_kernel_equals_the_numpy_path() -> None:
    """mask_from_runs (C++, straight from the runs) picks the pixels numpy's index maps do."""
    core = _native.require_native()
    rng = np.random.default_rng(1)
    for _ in range(400):
        height, width = (int(v) for v in rng.integers(1, 50, size=2))
        mask = (rng.integers(0, 4, (height, width)) * (rng.random((height, width)) < 0.4)
                ).astype(np.uint8)
        values, lengths, _, _ = mask_runs(encode_mask(mask))
        top, left = int(rng.integers(0, height)), int(rng.integers(0, width))
        crop = np.array([top, left, rng.integers(1, height - top + 1),
                         rng.integers(1, width - left + 1)], np.int64)
        out = np.full((int(rng.integers(1, 80)), int(rng.integers(1, 80))), 99, np.uint8)
        flip = bool(rng.integers(0, 2))
        assert core.mask_from_runs(values, lengths, height, width, crop, flip, out) == ""
        np.testing.assert_array_equal(out, map_mask(mask, crop, flip, out.shape))
    with pytest.raises(ValueError, match="runs cover 3 pixels, not its 4 x 5"):
        map_runs(values[:1], np.array([3], np.uint32), (4, 5), crop, False, out)
