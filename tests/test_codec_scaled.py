"""DCT-scaled decodes of coeffs records: where the JPEG path takes libjpeg's 1/2, 1/4 or 1/8
scaled IDCT (a crop 3x the output or more), a record reconstructs at the same scale (reduced
IDCTs, libjpeg-turbo's per-component scales and upsampling) and gives the same bits: every
kind, crops at every edge, both kernel sets, decode() and the BatchDecoder."""

from __future__ import annotations

import numpy as np
import pytest

import fastloader
from codec_corpus import corpus, kernel_set
from fastloader.decode import coeffs

pytestmark = [pytest.mark.native, pytest.mark.wheel]

DENOMINATORS = (2, 4, 8)
# Odd and MCU-aligned sizes big enough for 1/8 (24 pixels a side at least); 1-pixel and
# other tiny images never scale (test_codec_exact.py has them).
SIZES = ((37, 53), (64, 48), (121, 161), (30, 250))
CASES = corpus(SIZES)


@pytest.fixture(params=[True, False], ids=["avx2", "scalar"])
def kernels(request: pytest.FixtureRequest):
    """Runs a test with the AVX2 kernels (where the CPU has them) and with the scalar ones."""
    with kernel_set(request.param) as avx2:
        yield avx2


def _crops(height: int, width: int, d: int,
           rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
    """The whole image, crops at each corner, whole-width and whole-height strips at each edge,
    a centred one and random ones: all at least 3d pixels a side (smaller ones never take 1/d)."""
    m = 3 * d
    if height < m or width < m:
        return []
    h, w = max(m, height // 2), max(m, width // 2)
    crops = [(0, 0, height, width), (0, 0, h, w), (0, width - w, h, w), (height - h, 0, h, w),
             (height - h, width - w, h, w), (0, 0, height, w), (0, width - w, height, w),
             (0, 0, h, width), (height - h, 0, h, width),
             ((height - h) // 2, (width - w) // 2, h, w)]
    for _ in range(4):
        ch, cw = int(rng.integers(m, height + 1)), int(rng.integers(m, width + 1))
        crops.append((int(rng.integers(0, height - ch + 1)), int(rng.integers(0, width - cw + 1)),
                      ch, cw))
    return crops


def _size_for(crop: tuple[int, int, int, int], d: int, rng: np.random.Generator) -> tuple[int, int]:
    """An output size the JPEG path decodes the crop for at 1/d: the height floor(h / 3d) (under
    6d times it, so never 1/2d), the width anywhere from there down to half the crop's 1/3d."""
    top = crop[3] // (3 * d)
    return crop[2] // (3 * d), int(rng.integers(max(1, top // 2), top + 1))


def _unscaled(data: bytes, crop, size, flip: bool) -> np.ndarray:
    from fastloader import _core

    out = np.empty((*size, 3), np.uint8)
    assert _core.decode_into(data, crop, flip, out, dct_scaling=False) is None
    return out


@pytest.mark.parametrize("name,data", CASES, ids=[n for n, _ in CASES])
def test_scaled_decodes_equal_the_jpeg_path(name: str, data: bytes, kernels: bool) -> None:
    from fastloader import _core

    record = coeffs.encode(data)
    hdr = fastloader.header(data)
    rng = np.random.default_rng(len(data))
    seen, differs = set(), 0
    for d in DENOMINATORS:
        for crop in _crops(hdr.height, hdr.width, d, rng):
            size = _size_for(crop, d, rng)
            assert _core.dct_denominator(crop, size) == d  # the seam decode_into takes it from
            for flip in (False, True):
                want = fastloader.decode(data, crop=crop, size=size, flip=flip)
                got = fastloader.decode(record, crop=crop, size=size, flip=flip)
                assert np.array_equal(got, want), (name, d, crop, size, flip)
            differs += not np.array_equal(want, _unscaled(data, crop, size, flip))
            seen.add(d)
    assert seen == {d for d in DENOMINATORS if min(hdr.height, hdr.width) >= 3 * d}
    assert differs > 0  # the JPEG path did scale: a full-size decode then resample is not it


SMALL = corpus((SIZES[0], (17, 33), (7, 13), (8, 9)))  # 8x9 at 1/8: 1x2 pixels


@pytest.mark.parametrize("name,data", SMALL, ids=[n for n, _ in SMALL])
def test_scaled_reconstruction_is_libjpeg_turbos(name: str, data: bytes) -> None:
    """The whole record at 1/2, 1/4, 1/8 (not resampled) is what libjpeg-turbo's own scaled
    decode gives: Pillow's draft mode, through the libjpeg-turbo Pillow bundles (3.x)."""
    import io

    from PIL import Image, features

    from fastloader import _core

    if not features.version("libjpeg_turbo"):
        pytest.skip("Pillow is not built with libjpeg-turbo: its scaled decode is another IDCT")
    record = coeffs.encode(data)
    checked = 0
    for d in (1, *DENOMINATORS):
        image = Image.open(io.BytesIO(data))
        width = image.size[0]
        drafted = image.draft(image.mode, (max(1, width // d), max(1, image.size[1] // d)))
        if drafted is None or round(width / drafted[1][2]) != d:
            continue  # too small for Pillow to pick this scale
        reference = np.asarray(image.convert("RGB"))
        got = np.empty_like(reference)
        assert _core.coeffs_decode_scaled(record, d, got) is None
        assert np.array_equal(got, reference), (name, d)
        checked += 1
    assert checked >= 2


def test_the_batch_decoder_scales_records_as_jpegs() -> None:
    """The loader's path (BatchDecoder, threads, mixed crops) takes the same scale for both."""
    jpegs = [data for name, data in CASES if name.endswith("121x161")][::3]
    records = [coeffs.encode(j) for j in jpegs]
    n = len(jpegs)
    crops = np.array([[0, 0, 0, 0], [10, 20, 96, 120], [0, 0, 121, 72], [3, 5, 48, 150]] * n,
                     np.int32)[:n]
    flips = np.arange(n) % 2 == 1
    out, ref = np.zeros((n, 9, 11, 3), np.uint8), np.zeros((n, 9, 11, 3), np.uint8)
    with fastloader.BatchDecoder(num_threads=2) as decoder:
        assert decoder.decode_into(records, crops, flips, out) == [None] * n
        assert decoder.decode_into(jpegs, crops, flips, ref) == [None] * n
    assert np.array_equal(out, ref)


def test_dct_scaling_off_decodes_a_record_at_full_size() -> None:
    from fastloader import _core

    data = dict(CASES)["420-121x161"]
    record = coeffs.encode(data)
    crop, size = (0, 0, 121, 161), (10, 13)
    assert _core.dct_denominator(crop, size) == 4
    assert _core.dct_denominator(crop, size, dct_scaling=False) == 1
    got = np.empty((*size, 3), np.uint8)
    assert _core.coeffs_decode_into(record, crop, False, got, dct_scaling=False) is None
    assert np.array_equal(got, _unscaled(data, crop, size, False))
    assert not np.array_equal(got, fastloader.decode(record, size=size))


def test_both_kernel_sets_agree_on_extreme_dequantised_values() -> None:
    """Quant tables rewritten to values up to 65535 (the record's u16 fields; any record may hold
    them) push the IDCTs into 16-bit wrap-around and saturation: the AVX2 set keeps the scalar
    set's bits there too, at every scale."""
    from fastloader import _core

    rng = np.random.default_rng(3)
    for name in ("420-121x161", "422-64x48", "440-37x53", "410-121x161", "grey-64x48"):
        record = bytearray(coeffs.encode(dict(CASES)[name]))
        hdr = fastloader.header(record)
        for comp in range(hdr.components):
            table = 24 + comp * 130 + 2  # after the fixed header and this component's h, v bytes
            record[table:table + 128] = rng.integers(0, 65536, 64, dtype=np.uint16).tobytes()
        for d in (1, *DENOMINATORS):
            outs = []
            for avx2 in (True, False):
                with kernel_set(avx2):
                    out = np.empty((-(-hdr.height // d), -(-hdr.width // d), 3), np.uint8)
                    assert _core.coeffs_decode_scaled(bytes(record), d, out) is None
                    outs.append(out)
            assert np.array_equal(outs[0], outs[1]), (name, d)


@pytest.mark.parametrize("name", ["420-121x161", "422-64x48", "440-121x161", "grey-64x48",
                                  "444-121x161", "411-121x161"])
def test_extreme_quant_tables_decode_as_the_jpeg_path(name: str, kernels: bool) -> None:
    """Quant tables up to 65535 (a JPEG may carry 16-bit ones) overflow the IDCTs' 16-bit sums
    and saturate: records still give the JPEG path's bits, at full size and at every scale,
    because every kernel wraps and saturates where libjpeg-turbo's SIMD does (the JPEG here is
    the record's own coefficients and tables, written by coeffs.to_jpeg)."""
    from fastloader import _core

    rng = np.random.default_rng(len(name))
    for top in (255, 4095, 65535):
        record = bytearray(coeffs.encode(dict(CASES)[name]))
        hdr = fastloader.header(record)
        for comp in range(hdr.components):
            table = 24 + comp * 130 + 2
            record[table:table + 128] = rng.integers(1, top + 1, 64, dtype=np.uint16).tobytes()
        jpeg = coeffs.to_jpeg(bytes(record))
        checked = set()
        for d in (1, *DENOMINATORS):
            size = (max(1, hdr.height // (3 * d)), max(1, hdr.width // (3 * d)))
            if _core.dct_denominator((0, 0, hdr.height, hdr.width), size) != d:
                continue
            checked.add(d)
            want = fastloader.decode(jpeg, size=size)
            assert np.array_equal(fastloader.decode(bytes(record), size=size), want), (top, d)
        assert np.array_equal(fastloader.decode(bytes(record)), fastloader.decode(jpeg)), top
        assert len(checked) >= 2


@pytest.fixture(scope="module")
def large_datasets(tmp_path_factory: pytest.TempPathFactory):
    """(JPEG dataset, its coeffs recode) of 120-134 x 160-164 pixel images: large enough for the
    loader's small outputs to take 1/2, 1/4 and 1/8."""
    from fastloader.pack.pipeline.recode import recode
    from fastloader.pack.pipeline.tree import pack
    from imagegen import make_tree

    folder = tmp_path_factory.mktemp("scaled-loader")
    tree = make_tree(folder / "tree", classes=2, per_class=4, size=(120, 160), seed=4)
    pack(tree, folder / "jpeg.lmdb", workers=1, quiet=True)
    recode(folder / "jpeg.lmdb", folder / "coeffs.lmdb")
    return folder / "jpeg.lmdb", folder / "coeffs.lmdb"


@pytest.mark.parametrize("size", [12, 8, 5], ids=["half", "quarter", "eighth"])
def test_the_loader_over_records_scales_as_over_jpegs(large_datasets, size: int) -> None:
    """FastLoader over a coeffs dataset, outputs small enough for DCT scaling (Resize(size) +
    CenterCrop, RandomResizedCrop(size) + flip, float output): the JPEG dataset's batches."""
    import torch

    from fastloader import FastLoader, _core
    from fastloader.decode.augment import (
        CenterCrop,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
    )
    from helpers import MEAN, STD, collect

    want = {12: 2, 8: 4, 5: 8}[size]  # Resize(size) of the 120x160 ones
    assert _core.dct_denominator((0, 0, 120, 160), (size, size * 4 // 3)) == want
    src, dst = large_datasets
    for transforms in ([Resize(size), CenterCrop(size)],
                       [RandomResizedCrop(size, scale=(0.5, 1.0)), RandomHorizontalFlip()]):
        options = {"batch_size": 3, "shuffle": True, "seed": 2, "transforms": transforms,
                   "normalize": (MEAN, STD), "num_threads": 2}
        with FastLoader(src, **options) as a, FastLoader(dst, **options) as b:
            first, second = collect(a), collect(b)
        assert len(first) == len(second) == 3
        for (x, y), (u, v) in zip(first, second, strict=True):
            assert torch.equal(y, v) and torch.equal(x, u)
