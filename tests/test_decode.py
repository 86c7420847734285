"""decode()/header() parity with the Pillow reference, on both the native and fallback paths."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from fastloader.decode.decode import decode, header
from fastloader.errors import DecodeError, InvalidArgumentError, InvalidTypeError
from helpers import pillow_reference
from jpeg_corpus import corpus, photo_jpeg, psnr, random_boxes

CORPUS = corpus()


pytestmark = pytest.mark.wheel


@pytest.mark.parametrize("image", CORPUS, ids=lambda im: im.name)
def test_header_describes_the_corpus(image):
    got = header(image.data)
    assert (got.height, got.width) == (image.height, image.width)
    assert got.color_space == image.color_space
    assert got.subsampling == image.subsampling
    assert got.progressive == image.progressive


@pytest.mark.parametrize("image", CORPUS, ids=lambda im: im.name)
def test_full_decode_matches_pillow(image):
    got = decode(image.data)
    want = pillow_reference(image.data)
    assert got.shape == want.shape == (image.height, image.width, 3)
    assert got.dtype == np.uint8
    assert np.abs(got.astype(np.int16) - want).mean() <= 1.0


def test_crop_resize_flip_psnr_against_pillow():
    rng = np.random.default_rng(3)
    scores = []
    for seed in range(6):
        data = photo_jpeg(375, 500, seed)
        for box in random_boxes(rng, 375, 500, 8):
            size = (224, 224) if seed % 2 else (int(rng.integers(8, 64)), int(rng.integers(8, 64)))
            flip = bool(rng.integers(0, 2))
            got = decode(data, crop=box, size=size, flip=flip)
            assert got.shape == (*size, 3)
            scores.append(psnr(got, pillow_reference(data, box, size, flip)))
    assert np.median(scores) >= 30.0, scores


def test_small_output_from_big_crop_stays_close():
    # Big crop, tiny output: the native path takes libjpeg's 1/8 DCT scale here.
    data = photo_jpeg(600, 800, seed=9)
    box, size = (40, 60, 520, 720), (32, 40)
    got = decode(data, crop=box, size=size, flip=True)
    assert psnr(got, pillow_reference(data, box, size, True)) >= 30.0


def test_crop_without_resize_is_exact_region():
    data = photo_jpeg(64, 96, seed=1, subsampling=0)
    got = decode(data, crop=(5, 7, 30, 40))
    full = decode(data)
    assert np.abs(got.astype(np.int16) - full[5:35, 7:47]).mean() <= 1.0


def test_result_is_a_writable_owned_array():
    out = decode(photo_jpeg(40, 60, seed=1))
    assert out.flags.writeable and out.flags.c_contiguous
    out[0, 0] = 0  # callers may edit what they get, on either path


def test_flip_mirrors_columns():
    data = photo_jpeg(40, 60, seed=2)
    np.testing.assert_array_equal(decode(data, flip=True), decode(data)[:, ::-1])


def test_png_and_webp_take_the_same_semantics():
    pixels = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    for fmt in ("PNG", "WEBP"):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format=fmt, lossless=True)
        data = buffer.getvalue()
        assert header(data).width == 40
        np.testing.assert_array_equal(
            decode(data, crop=(1, 2, 20, 30), size=(10, 12), flip=True),
            pillow_reference(data, (1, 2, 20, 30), (10, 12), True),
        )


def test_accepts_memoryview_and_numpy_bytes():
    data = photo_jpeg(20, 30, seed=4)
    want = decode(data)
    np.testing.assert_array_equal(decode(memoryview(data)), want)
    np.testing.assert_array_equal(decode(np.frombuffer(data, np.uint8)), want)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"crop": (0, 0, 0, 5)},
        {"crop": (-1, 0, 5, 5)},
        {"crop": (0, 0, 21, 5)},
        {"crop": (0, 25, 5, 10)},
        {"crop": (0, 0, 5)},
        {"size": (0, 5)},
        {"size": (5, 5, 5)},
    ],
)
def test_bad_arguments_raise_invalid_argument(kwargs):
    with pytest.raises(InvalidArgumentError):
        decode(photo_jpeg(20, 30, seed=5), **kwargs)


def test_bad_types_raise_invalid_type():
    with pytest.raises(InvalidTypeError):
        decode("not bytes")
    with pytest.raises(InvalidTypeError):
        decode(photo_jpeg(20, 30, seed=5), crop=(0, 0, 2.5, 3))


@pytest.mark.parametrize(
    "data", [b"", b"\xff\xd8", b"\xff\xd8\xff\xe0garbage", b"not an image at all"]
)
def test_bad_bytes_raise_decode_error(data):
    with pytest.raises(DecodeError):
        decode(data)


def test_truncated_jpeg_raises_decode_error():
    data = photo_jpeg(64, 64, seed=6)
    with pytest.raises(DecodeError):
        decode(data[: len(data) // 2])
