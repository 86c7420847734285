"""Coeffs records decode to the JPEG path's bits: every kind, size, crop edge and kernel set."""

from __future__ import annotations

import numpy as np
import pytest

import fastloader
from codec_corpus import corpus, kernel_set
from fastloader.decode import coeffs
from fastloader.errors import DecodeError
from imagegen import encode, photo_like
from jpeg_writer import first_scans, write_jpeg

pytestmark = [pytest.mark.native, pytest.mark.wheel]

CORPUS = corpus()


@pytest.fixture(params=[True, False], ids=["avx2", "scalar"])
def kernels(request: pytest.FixtureRequest):
    """Runs a test with the AVX2 kernels (where the CPU has them) and with the scalar ones."""
    with kernel_set(request.param) as avx2:
        yield avx2


@pytest.mark.parametrize("name,data", CORPUS, ids=[n for n, _ in CORPUS])
def test_full_decode_equals_the_jpeg_path(name: str, data: bytes, kernels: bool) -> None:
    record = coeffs.encode(data)
    assert coeffs.is_coeffs(record)
    assert np.array_equal(fastloader.decode(record), fastloader.decode(data)), name


def test_header_of_a_record_says_what_the_jpeg_says() -> None:
    for name, data in CORPUS[:40]:
        a, b = fastloader.header(coeffs.encode(data)), fastloader.header(data)
        assert (a.width, a.height, a.components, a.color_space) == (
            b.width, b.height, b.components, b.color_space), name
        if b.subsampling != "other":
            assert a.subsampling == b.subsampling, name


def _edge_crops(height: int, width: int,
                rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
    """Crops touching each edge and corner, 1-pixel crops, and random ones."""
    h, w = max(1, height // 3), max(1, width // 3)
    crops = [(0, 0, h, w), (0, width - w, h, w), (height - h, 0, h, w),
             (height - h, width - w, h, w), (0, 0, height, 1), (0, width - 1, height, 1),
             (height - 1, 0, 1, width), (0, 0, 1, 1), (height - 1, width - 1, 1, 1),
             ((height - h) // 2, (width - w) // 2, h, w)]
    for _ in range(6):
        ch, cw = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        crops.append((int(rng.integers(0, height - ch + 1)), int(rng.integers(0, width - cw + 1)),
                      ch, cw))
    return crops


CROP_CASES = [(n, d) for n, d in CORPUS if n.split("-")[-1] in ("37x53", "121x161", "3x300")]


@pytest.mark.parametrize("name,data", CROP_CASES, ids=[n for n, _ in CROP_CASES])
def test_crops_at_every_edge_equal_the_jpeg_path(name: str, data: bytes, kernels: bool) -> None:
    record = coeffs.encode(data)
    hdr = fastloader.header(data)
    rng = np.random.default_rng(len(data))
    for crop in _edge_crops(hdr.height, hdr.width, rng):
        for flip in (False, True):
            got = fastloader.decode(record, crop=crop, flip=flip)
            assert np.array_equal(got, fastloader.decode(data, crop=crop, flip=flip)), (name, crop)


def _unscaled(data: bytes, crop, size, flip: bool) -> np.ndarray:
    """A decode at full DCT size then resampled, whichever path the bytes take."""
    from fastloader import _core

    out = np.empty((*size, 3), np.uint8)
    if coeffs.is_coeffs(data):
        assert _core.coeffs_decode_into(data, crop, flip, out, dct_scaling=False) is None
    else:
        assert _core.decode_into(data, crop, flip, out, dct_scaling=False) is None
    return out


@pytest.mark.parametrize("name,data", CROP_CASES[::2], ids=[n for n, _ in CROP_CASES[::2]])
def test_resized_crops_follow_the_jpeg_path(name: str, data: bytes) -> None:
    """Resized crops, DCT-scaled where the JPEG path scales (test_codec_scaled.py covers every
    denominator) or not, and with DCT scaling off: bit-exact with the JPEG path either way."""
    record = coeffs.encode(data)
    hdr = fastloader.header(data)
    rng = np.random.default_rng(7)
    for crop in _edge_crops(hdr.height, hdr.width, rng):
        size = (int(rng.integers(1, 70)), int(rng.integers(1, 70)))
        flip = bool(rng.integers(0, 2))
        got = fastloader.decode(record, crop=crop, size=size, flip=flip)
        want = fastloader.decode(data, crop=crop, size=size, flip=flip)
        assert np.array_equal(got, want), (name, crop, size)
        unscaled = _unscaled(record, crop, size, flip)
        assert np.array_equal(unscaled, _unscaled(data, crop, size, flip)), (name, crop, size)


def test_what_records_do_not_hold_is_refused_with_the_fix() -> None:
    """A progressive file whose scans stop early decodes with libjpeg's block smoothing, which
    records do not do: it stays JPEG. Fractional sampling and over 10 blocks an MCU libjpeg
    cannot decode either."""
    pixels = photo_like(40, 48, seed=3)
    unfinished = first_scans(encode(pixels, "JPEG", "RGB", quality=90, progressive=True), 3)
    fastloader.decode(unfinished)  # the JPEG path decodes it (smoothed)
    with pytest.raises(DecodeError, match=r"unfinished scans.*keep it JPEG"):
        coeffs.encode(unfinished)
    for factors in (((3, 1), (2, 1), (1, 1)), ((3, 3), (1, 1), (1, 1))):
        with pytest.raises(DecodeError, match=r"--codec jpeg"):
            coeffs.encode(write_jpeg(pixels, factors))


def test_damaged_jpegs_are_not_encoded() -> None:
    """Nor one the JPEG path refuses as Pillow does (a marker byte below 0xC0 after SOI)."""
    data = encode(photo_like(40, 48, seed=4), "JPEG", "RGB", quality=90)
    pillow_refuses = data[:2] + b"\xff\x01" + data[2:]
    with pytest.raises(DecodeError):
        fastloader.decode(pillow_refuses)
    for bad in (data[: len(data) // 2], b"\xff\xd8\xff" + b"\x00" * 40, b"not a jpeg",
                pillow_refuses):
        with pytest.raises(DecodeError, match="cannot store"):
            coeffs.encode(bad)


def test_layout_parameters_change_the_bytes_not_the_pixels() -> None:
    data = encode(photo_like(70, 90, seed=5), "JPEG", "RGB", quality=95)
    reference = fastloader.decode(data)
    sizes = set()
    for seg_mcus, nibble_from in ((1, 1), (4, 10), (255, 64), (2, 30)):
        record = coeffs.encode(data, seg_mcus=seg_mcus, nibble_from=nibble_from)
        sizes.add(len(record))
        assert np.array_equal(fastloader.decode(record), reference)
    assert len(sizes) == 4
    with pytest.raises(DecodeError, match="seg_mcus"):
        coeffs.encode(data, seg_mcus=0)


def test_batch_decoder_mixes_records_jpegs_and_pngs() -> None:
    from helpers import png_bytes

    jpegs = [encode(photo_like(40 + k, 50 + 3 * k, seed=k), "JPEG", "RGB", quality=90)
             for k in range(6)]
    records = [coeffs.encode(j) if k % 2 else j for k, j in enumerate(jpegs)] + [png_bytes(1)]
    crops = np.array([[0, 0, 0, 0], [3, 4, 30, 40]] * 3 + [[0, 0, 0, 0]], np.int32)
    flips = np.arange(len(records)) % 3 == 0
    with fastloader.BatchDecoder(num_threads=2) as decoder:
        out = np.zeros((len(records), 24, 20, 3), np.uint8)
        ref = np.zeros_like(out)
        assert decoder.decode_into(records, crops, flips, out) == [None] * len(records)
        assert decoder.decode_into([*jpegs, png_bytes(1)], crops, flips, ref) == [None] * 7
    # DCT scaling is off for these sizes (crops under 3x the output per side): same bits
    assert np.array_equal(out, ref)


def test_the_exif_orientation_is_kept_in_the_record() -> None:
    """Records hold the stored pixels (as decode() gives them by default) and the source's
    EXIF orientation, the one piece of metadata the loader may act on."""
    import io

    from PIL import Image

    pixels = photo_like(20, 30, seed=9)
    for value in (1, 3, 6, 8):
        exif = Image.Exif()
        exif[0x0112] = value
        for block in (exif.tobytes(), _big_endian_exif(value)):  # "II" and "MM" TIFF data
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, "JPEG", quality=90, exif=block)
            data = buffer.getvalue()
            assert Image.open(io.BytesIO(data)).getexif()[0x0112] == value  # as Pillow reads it
            record = coeffs.encode(data)
            assert coeffs.orientation(record) == value
            assert np.array_equal(fastloader.decode(record), fastloader.decode(data))
    plain = encode(pixels, "JPEG", "RGB", quality=90)
    assert coeffs.orientation(coeffs.encode(plain)) == 0


def _big_endian_exif(value: int) -> bytes:
    """A minimal big-endian ("MM") EXIF block with one orientation entry."""
    ifd = (1).to_bytes(2, "big") + bytes.fromhex("0112 0003 00000001") + \
        value.to_bytes(2, "big") + b"\0\0" + (0).to_bytes(4, "big")
    return b"Exif\0\0MM\0*" + (8).to_bytes(4, "big") + ifd


def test_batch_places_and_planar_output_match_the_jpeg_records() -> None:
    """The BatchDecoder's letterbox placements and planar float output take coeffs records as
    they take JPEGs (same slot, same fill, same planes)."""
    jpegs = [encode(photo_like(30 + 9 * k, 41 + 4 * k, seed=k), "JPEG", "RGB", quality=90,
                    subsampling=k % 3) for k in range(6)]
    records = [coeffs.encode(j) for j in jpegs]
    crops = np.array([[0, 0, 0, 0], [2, 3, 20, 25]] * 3, np.int32)
    flips = np.arange(6) % 2 == 1
    places = np.array([[0, 0, 18, 20], [3, 2, 12, 16]] * 3, np.int32)
    results = []
    with fastloader.BatchDecoder(num_threads=2) as decoder:
        for batch in (jpegs, records):
            out = np.zeros((6, 18, 20, 3), np.uint8)
            planar = np.zeros((6, 3, 18, 20), np.float32)
            errors = decoder.decode_into(batch, crops, flips, out, planar=planar,
                                         scale=(0.5, 0.25, 2.0), shift=(1.0, 0.0, -3.0),
                                         places=places, fill=114)
            assert errors == [None] * 6
            results.append((out, planar))
    assert np.array_equal(results[0][0], results[1][0])
    assert np.array_equal(results[0][1], results[1][1])
    assert (results[1][0][1, 0] == 114).all()  # the fill around a placed crop


def test_a_record_written_back_as_jpeg_has_its_pixels() -> None:
    import io

    from PIL import Image

    for name, data in CORPUS[::7]:
        record = coeffs.encode(data)
        jpeg = coeffs.to_jpeg(record)
        assert jpeg[:3] == b"\xff\xd8\xff"
        assert np.array_equal(fastloader.decode(jpeg), fastloader.decode(data)), name
        # libjpeg writes its own padding blocks (beyond the image: never seen), so the bytes
        # settle after one round trip
        again = coeffs.encode(jpeg)
        assert coeffs.encode(coeffs.to_jpeg(again)) == again, name
    exif = Image.Exif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    Image.fromarray(photo_like(20, 30, seed=1)).save(buffer, "JPEG", exif=exif.tobytes())
    back = coeffs.to_jpeg(coeffs.encode(buffer.getvalue()))
    assert Image.open(io.BytesIO(back)).getexif()[0x0112] == 6
    record = bytearray(coeffs.encode(CORPUS[5][1]))
    record[-20] ^= 0xFF  # the last segment's byte stream
    with pytest.raises(DecodeError, match="as JPEG"):
        coeffs.to_jpeg(bytes(record))
