"""Issue 38 items 8 and 9: images the front door took wrongly.

A damaged EXIF block is metadata: the JPEG packs and loads, its pixels Pillow's, and its
orientation is what Pillow reads from it, 1 where Pillow reads none, through every reader of
EXIF (pack-time validation, decode(), both BatchDecoder backends, FastLoader, coeffs records),
with one note naming the file at pack time. The JPEGs are Pillow's with an APP1 segment built
here byte by byte: Pillow's Tests/images/hopper_bad_exif.jpg's own layout (IFD0 declares 32
entries and holds 6 in a 132-byte block), and truncated, out-of-range, unmarked, mistyped and
looping IFDs. That file is refused for another reason, its scan data (libjpeg: "bad Huffman
code"; Pillow shows it as noise): the refusal says so.

A 16-bit grey PNG (Pillow's mode I;16) loads as its high byte, not as the white that Pillow's
convert("RGB") makes of it, and pack time says so naming the file; a 16-bit RGB PNG (written
here with zlib) loads as Pillow reads it, its high bytes too.
"""

from __future__ import annotations

import io
import logging
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageOps

import fastloader
from conftest import NATIVE_DISABLED
from fastloader.decode import coeffs
from fastloader.decode.decode import BatchDecoder, decode
from fastloader.format.open import open_dataset
from fastloader.pack.sources import validate
from imagegen import photo_like

BACKENDS = ["pillow"] + ([] if NATIVE_DISABLED else ["native"])
HEIGHT, WIDTH = 40, 72


def _ifd(entries: list[tuple[int, int, int, bytes]], order: str = ">", count: int | None = None,
         first: int = 8, next_ifd: int = 0, tail: bytes = b"") -> bytes:
    """A TIFF header and IFD0 (tag, type, count, 4 value bytes), then tail; count and
    first may lie about the entries and where they start."""
    mark = b"MM\x00*" if order == ">" else b"II*\x00"
    out = mark + struct.pack(order + "IH", first, len(entries) if count is None else count)
    out += b"".join(struct.pack(order + "HHI", *e[:3]) + e[3] for e in entries)
    return out + struct.pack(order + "I", next_ifd) + tail


def _short(value: int, order: str = ">") -> bytes:
    return struct.pack(order + "HH", value, 0)


def _hopper(orientation: int) -> bytes:
    """hopper_bad_exif.jpg's EXIF: big-endian, IFD0 says 32 entries and holds 6 (its
    orientation among them), then the resolutions and a 2-entry Exif IFD: 132 bytes."""
    entries = [(0x0106, 3, 1, _short(1)), (0x0112, 3, 1, _short(orientation)),
               (0x011A, 5, 1, struct.pack(">I", 0x56)), (0x011B, 5, 1, struct.pack(">I", 0x5E)),
               (0x0128, 3, 1, _short(3)), (0x8769, 4, 1, struct.pack(">I", 0x66))]
    exif_ifd = (struct.pack(">H", 2) + struct.pack(">HHII", 0xA002, 4, 1, WIDTH)
                + struct.pack(">HHII", 0xA003, 4, 1, HEIGHT) + b"\0" * 4)
    tiff = _ifd(entries, count=32, tail=struct.pack(">4I", 3779, 100, 3779, 100) + exif_ifd)
    assert len(tiff) == 132
    return tiff


# name -> (the TIFF block after "Exif\0\0", the orientation Pillow's getexif gives: the one
# every path must apply; 1 where Pillow reads none)
CASES: dict[str, tuple[bytes, int]] = {
    "hopper-bad-exif": (_hopper(1), 1),
    "hopper-layout-turned": (_hopper(6), 6),  # Pillow keeps the entries read before the end
    "truncated-ifd": (_ifd([(0x0112, 3, 1, _short(6))])[:14], 1),
    "ifd-offset-past-the-end": (_ifd([(0x0112, 3, 1, _short(6))], first=4000), 1),
    "bad-byte-order-mark": (b"XX" + _ifd([(0x0112, 3, 1, _short(6))])[2:], 1),
    "orientation-an-ascii-string": (_ifd([(0x0112, 2, 4, b"six\x00")]), 1),
    "orientation-a-count-of-0": (_ifd([(0x0112, 3, 0, _short(6))]), 1),
    "orientation-9": (_ifd([(0x0112, 3, 1, _short(9))]), 1),
    "orientation-value-past-the-end": (_ifd([(0x0112, 3, 3, struct.pack(">I", 400))]), 1),
    "little-endian-ifd-loop": (_ifd([(0x0112, 3, 1, _short(8, "<"))], "<", next_ifd=8), 8),
    "exif-ifd-pointing-at-itself": (_ifd([(0x8769, 4, 1, struct.pack(">I", 8)),
                                          (0x0112, 3, 1, _short(3))]), 3),
}
# the blocks pack time notes, naming the file
DAMAGED = {"hopper-bad-exif", "truncated-ifd", "orientation-a-count-of-0",
           "ifd-offset-past-the-end", "bad-byte-order-mark", "orientation-an-ascii-string",
           "orientation-9", "orientation-value-past-the-end"}


def with_exif(tiff: bytes, seed: int = 0, grey: bool = False) -> bytes:
    """A JPEG Pillow writes, its EXIF APP1 segment (built here) after the JFIF APP0."""
    buffer = io.BytesIO()
    image = Image.fromarray(photo_like(HEIGHT, WIDTH, seed))
    (image.convert("L") if grey else image).save(buffer, "JPEG", quality=90)
    data = buffer.getvalue()
    assert data[2:4] == b"\xff\xe0"
    after_app0 = 4 + struct.unpack(">H", data[4:6])[0]
    payload = b"Exif\x00\x00" + tiff
    return (data[:after_app0] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
            + data[after_app0:])


def pillow_turned(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.array(ImageOps.exif_transpose(image).convert("RGB"))


@pytest.fixture(scope="module")
def jpegs() -> dict[str, bytes]:
    return {name: with_exif(tiff, seed=k, grey=name.startswith("hopper"))
            for k, (name, (tiff, _)) in enumerate(CASES.items())}


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's, about the blocks
def test_the_cases_are_what_pillow_reads(jpegs: dict[str, bytes]) -> None:
    """Each block is malformed the way its name says: Pillow opens the JPEG, and its
    exif_transpose turns it by the orientation given (none where it reads none)."""
    for name, data in jpegs.items():
        with Image.open(io.BytesIO(data)) as image:
            size = image.size
        turned = pillow_turned(data)
        swap = CASES[name][1] >= 5
        assert turned.shape[:2] == ((size[0], size[1]) if swap else (size[1], size[0])), name


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_decode_reads_the_orientation_pillow_reads(jpegs: dict[str, bytes]) -> None:
    for name, data in jpegs.items():
        turned = decode(data, apply_exif_orientation=True)
        assert turned.shape == pillow_turned(data).shape, name
        assert np.abs(turned.astype(int) - pillow_turned(data)).mean() < 1.5, name


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_decoders_give_pillows_pixels(jpegs: dict[str, bytes], backend: str) -> None:
    """The orientations Pillow reads, given to a BatchDecoder: a crop of the turned image,
    Pillow's pixels (the native IDCT rounds a little apart from Pillow's)."""
    names = list(jpegs)
    records = [jpegs[n] for n in names]
    orientations = np.array([CASES[n][1] for n in names], np.uint8)
    crops = np.array([[2, 3, 30, 30]] * len(names), np.int32)  # inside every turned image
    out = np.empty((len(names), 30, 30, 3), np.uint8)
    with BatchDecoder(1, backend) as decoder:
        assert decoder.decode_into(records, crops, np.zeros(len(names), bool), out,
                                   orientations=orientations) == [None] * len(names)
    for k, name in enumerate(names):
        want = pillow_turned(records[k])[2:32, 3:33]
        assert np.abs(out[k].astype(int) - want).mean() < 1.5, name


@pytest.mark.skipif(NATIVE_DISABLED, reason="coeffs records need the native extension")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_coeffs_record_keeps_the_orientation_pillow_reads(jpegs: dict[str, bytes]) -> None:
    """The extension reads the orientation itself (csrc/coeffs_encode.cpp) and writes it back
    into the JPEG it makes: a count of 0, or a signed type, read as Pillow reads them."""
    for name, data in jpegs.items():
        record = coeffs.encode(data)
        assert coeffs.orientation(record) in (0, 1) if CASES[name][1] == 1 else (
            coeffs.orientation(record) == CASES[name][1]), name
        assert decode(record).shape == (HEIGHT, WIDTH, 3)
    sshort = with_exif(_ifd([(0x0112, 8, 1, _short(6))]))  # SSHORT: Pillow reads 6
    assert coeffs.orientation(coeffs.encode(sshort)) == 6


@pytest.fixture(scope="module")
def packed(jpegs: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad-exif")
    for name, data in jpegs.items():
        (root / "tree" / name).mkdir(parents=True)
        (root / "tree" / name / "a.jpg").write_bytes(data)
    fastloader.pack(root / "tree", root / "o.lmdb", workers=1, apply_exif_orientation=True)
    return root / "o.lmdb"


def test_pack_keeps_every_file_with_pillows_orientation(packed: Path) -> None:
    with open_dataset(packed) as ds:
        assert len(ds) == len(CASES)
        assert ds.orientations is not None
        for i in range(len(ds)):
            name = ds.path(i).split("/")[0]
            assert int(ds.orientations[i]) == CASES[name][1], name


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_loader_turns_by_pillows_orientation(packed: Path, backend: str) -> None:
    with fastloader.FastLoader(packed, batch_size=len(CASES), device="cpu", num_threads=1,
                               backend=backend, apply_exif_orientation=True,
                               transforms=[fastloader.CenterCrop(36)]) as loader:
        images, labels = next(iter(loader))
    with open_dataset(packed) as ds:
        for k, label in enumerate(labels.tolist()):
            want = pillow_turned(bytes(ds.record(_row(ds, label))))
            h, w = want.shape[:2]
            top, left = round((h - 36) / 2), round((w - 36) / 2)
            got = images[k].permute(1, 2, 0).numpy().astype(int)
            assert np.abs(got - want[top:top + 36, left:left + 36]).mean() < 1.5, label


def _row(ds: Any, label: int) -> int:
    return int(np.flatnonzero(np.asarray(ds.labels) == label)[0])


def test_pack_notes_a_damaged_block_once_naming_the_file(
        jpegs: dict[str, bytes], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tree = tmp_path / "tree" / "a"
    tree.mkdir(parents=True)
    for name, data in jpegs.items():
        (tree / f"{name}.jpg").write_bytes(data)
    with caplog.at_level(logging.WARNING, logger=validate.WARNED_LOG.name):
        fastloader.pack(tmp_path / "tree", tmp_path / "o.lmdb", workers=1,
                        apply_exif_orientation=True)
    said = [r.getMessage() for r in caplog.records if r.name == validate.WARNED_LOG.name]
    notes = {m.split(":")[0]: m for m in said}
    assert len(notes) == len(said)  # one note a file
    # Pillow itself warns about the hopper layout's block (its orientation read all the same)
    assert set(notes) == {f"a/{name}.jpg" for name in DAMAGED | {"hopper-layout-turned"}}
    for name in DAMAGED | {"hopper-layout-turned"}:
        message = notes[f"a/{name}.jpg"]
        assert "EXIF" in message, message
        assert ("DamagedExifWarning" in message) == (not name.startswith("hopper")), message
        if "DamagedExifWarning" in message:
            assert "the orientation is taken as 1, the pixels are packed as stored" in message


def _damaged_scan(data: bytes) -> bytes:
    """16 one-bits (two stuffed 0xFF bytes) in the middle of the scan: no Huffman code of a
    standard table is all ones, so libjpeg warns "bad Huffman code" and Pillow goes on."""
    start = data.index(b"\xff\xda")
    at = (start + len(data)) // 2
    while data[at - 1] == 0xFF or data[at] == 0xFF:
        at += 1
    return data[:at] + b"\xff\x00\xff\x00" + data[at + 4:]


@pytest.mark.skipif(NATIVE_DISABLED, reason="the Pillow path cannot see libjpeg's warnings")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_damaged_scan_is_refused_saying_it_is_not_the_exif() -> None:
    """hopper_bad_exif.jpg's own refusal: its scan data is damaged (Pillow decodes it, as
    noise, without a word); the reason says that, not the EXIF, is what is wrong."""
    data = _damaged_scan(with_exif(_hopper(1), grey=True))
    with Image.open(io.BytesIO(data)) as image:
        image.load()  # Pillow decodes it without a word
    record = validate.prepare_data(data, apply_exif_orientation=True)
    assert record.data is None and record.error is not None
    assert "Corrupt JPEG data" in record.error
    assert "its compressed pixels, not its metadata" in record.error
    assert "Pillow opens it without a word" in record.error


def _png16_rgb(pixels: np.ndarray) -> bytes:
    """A 16-bit RGB PNG (colour type 2, bit depth 16), written with zlib."""
    height, width, _ = pixels.shape
    rows = b"".join(b"\x00" + pixels[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def _sixteen_bit(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << 16, (HEIGHT, WIDTH, 3), dtype=np.uint16)


def _png16_grey(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(values).save(buffer, "PNG")  # uint16: Pillow's I;16, a 16-bit PNG
    return buffer.getvalue()


def test_16_bit_pngs_load_as_their_high_bytes(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    grey, rgb = _sixteen_bit(1)[..., 0], _sixteen_bit(2)
    tree = tmp_path / "tree" / "a"
    tree.mkdir(parents=True)
    (tree / "grey.png").write_bytes(_png16_grey(grey))
    (tree / "rgb.png").write_bytes(_png16_rgb(rgb))
    with Image.open(tree / "grey.png") as image:
        assert image.mode == "I;16" and (np.array(image.convert("RGB")) == 255).mean() > 0.99
    want = {"a/grey.png": np.repeat((grey >> 8).astype(np.uint8)[..., None], 3, 2),
            "a/rgb.png": (rgb >> 8).astype(np.uint8)}
    with caplog.at_level(logging.WARNING, logger=validate.WARNED_LOG.name):
        fastloader.pack(tmp_path / "tree", tmp_path / "o.lmdb", workers=1)
    notes = sorted(r.getMessage() for r in caplog.records if "BitDepthWarning" in r.getMessage())
    assert [n.split(":")[0] for n in notes] == ["a/grey.png", "a/rgb.png"]
    assert all("loaded as 8 bits by each sample's high byte (value >> 8)" in n for n in notes)
    with open_dataset(tmp_path / "o.lmdb") as ds:
        for i in range(len(ds)):
            assert np.array_equal(decode(bytes(ds.record(i))), want[ds.path(i)]), ds.path(i)
    for backend in BACKENDS:
        with fastloader.FastLoader(tmp_path / "o.lmdb", batch_size=2, device="cpu",
                                   num_threads=1, backend=backend, shuffle=False) as loader:
            images, _ = next(iter(loader))
        with open_dataset(tmp_path / "o.lmdb") as ds:
            for k in range(2):
                got = images[k].permute(1, 2, 0).numpy()
                assert np.array_equal(got, want[ds.path(k)]), (backend, ds.path(k))


def test_a_16_bit_png_shrunk_by_max_side_keeps_its_high_bytes() -> None:
    grey = _sixteen_bit(3)[..., 0]
    record = validate.prepare_data(_png16_grey(grey), max_side=36)
    assert record.reencoded and record.data is not None
    with Image.open(io.BytesIO(record.data)) as image:
        shrunk = np.array(image.convert("L"), np.float64)
    assert abs(shrunk.mean() - (grey >> 8).mean()) < 3  # white (255) before


def test_a_16_bit_pil_image_packed_as_jpeg_keeps_its_high_bytes(tmp_path: Path) -> None:
    grey = _sixteen_bit(4)[..., 0]
    image = Image.fromarray(grey)  # a PIL image handed to pack(), mode I;16
    assert image.mode == "I;16"
    fastloader.pack([{"image": image, "label": 0}], tmp_path / "p.lmdb", pil_format="jpeg",
                    quality=95, fields={"image": "image", "label": "int"})
    with open_dataset(tmp_path / "p.lmdb") as ds:
        got = decode(bytes(ds.record(0)))[..., 0].astype(np.float64)
    assert abs(got.mean() - (grey >> 8).mean()) < 3  # white (255) before
