"""Valid JPEGs edited the ways real files go wrong (libjpeg warnings, Pillow's header quirks,
damaged entropy data, truncation), each with the verdict Pillow gives it: decoded, or refused;
and whether the edit damaged pixels (Pillow decodes those grey; the native decoder refuses)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from imagegen import encode, photo_like


@dataclass(frozen=True)
class Edit:
    """One way of editing a valid file, whether Pillow still decodes the result, and whether
    the edit damaged its pixels (the native decoder then refuses it, where Pillow cannot tell)."""

    name: str
    apply: Callable[[bytes], bytes]
    decodes: bool
    damaged: bool = False

    def native_decodes(self) -> bool:
        """The native decoder's verdict on a whole read: Pillow's, less damaged pixels."""
        return self.decodes and not self.damaged


def segments(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, marker, length) of every marker segment from the first after SOI to SOS."""
    found, at = [], 2
    while at + 4 <= len(data):
        marker = data[at + 1]
        length = struct.unpack(">H", data[at + 2 : at + 4])[0]
        found.append((at, marker, length))
        if marker == 0xDA:
            break
        at += 2 + length
    return found


def _offset_of(data: bytes, marker: int) -> int:
    return next(at for at, m, _ in segments(data) if m == marker)


def _scan_start(data: bytes) -> int:
    at, _, length = segments(data)[-1]
    return at + 2 + length


def segment(marker: int, payload: bytes) -> bytes:
    """A marker segment whose length field counts payload."""
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def _before(marker: int, inserted: bytes) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        at = _offset_of(data, marker)
        return data[:at] + inserted + data[at:]

    return edit


def _after_soi(inserted: bytes) -> Callable[[bytes], bytes]:
    return lambda data: data[:2] + inserted + data[2:]


def _cut_scan(data: bytes) -> bytes:
    """200 bytes taken out of the middle of the entropy data, EOI kept: a whole file whose
    data segment ends early (libjpeg: "premature end of data segment", grey blocks)."""
    start = _scan_start(data)
    middle = start + (len(data) - start) // 2
    return data[:middle] + data[middle + 200 :]


def _truncate(fraction: float) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        start = _scan_start(data)
        return data[: start + int((len(data) - 2 - start) * fraction)]

    return edit


_PHOTOSHOP = b"Photoshop 3.0\x00"
# Decoded by both backends (libjpeg warns, or its markers are odd; Pillow reads them).
WARNINGS = (
    Edit("extraneous-bytes-before-dqt", _before(0xDB, b"\x00\x13\x37"), True),
    Edit("ff00-after-soi", _after_soi(b"\xff\x00"), True),
    Edit("ffff-padding-before-dqt", _before(0xDB, b"\xff\xff\xff"), True),
    Edit("junk-app1", _after_soi(segment(0xE1, b"\x00not exif at all\xff\x00\x01")), True),
    Edit("broken-photoshop-app13",
         _after_soi(segment(0xED, _PHOTOSHOP + b"8BIM\x03\xed\x00\x00\x00\x00\xff\xff")), True),
    Edit("app13-length-short-of-its-data",
         _after_soi(b"\xff\xed\x00\x10" + _PHOTOSHOP + b"8BIM\x04\x04\x00\x00\x00\x00"), True),
    Edit("app14-length-short-of-its-data", _after_soi(b"\xff\xee\x00\x0aAdobe\x00\x64\x00\x00"),
         True),
    Edit("app14-truncated-to-7-bytes", _after_soi(segment(0xEE, b"Adobe\x00\x64")), True),
    Edit("unknown-jfif-revision", lambda d: d.replace(b"JFIF\x00\x01", b"JFIF\x00\x03", 1), True),
    Edit("garbage-after-eoi", lambda d: d + b"\x00garbage\xff\xd8", True),
)
# Decoded by Pillow as grey blocks, which it cannot tell from pixels; refused natively (a
# warning that damages pixels stays an error).
DAMAGED = (Edit("data-segment-ends-early", _cut_scan, True, damaged=True),)
# Refused by both backends.
REFUSED = (
    Edit("junk-right-after-soi", _after_soi(b"junk"), False),
    Edit("app14-truncated-to-6-bytes", _after_soi(segment(0xEE, b"Adobe\x00")), False),
    Edit("jfif-app0-truncated-to-6-bytes", _after_soi(segment(0xE0, b"JFIF\x00\x01")), False),
    Edit("tem-marker-in-header", _before(0xDB, b"\xff\x01"), False),
    Edit("truncated-in-header", lambda d: d[: _offset_of(d, 0xDA) + 3], False),
    Edit("truncated-at-10%-of-data", _truncate(0.1), False),
    Edit("truncated-at-50%-of-data", _truncate(0.5), False),
    Edit("truncated-at-95%-of-data", _truncate(0.95), False),
)


def _rgb(height: int, width: int, seed: int) -> np.ndarray:
    return photo_like(height, width, seed)


def bases() -> dict[str, bytes]:
    """Valid files to edit: each colour space, subsampling, progressive, restart markers."""
    pixels = _rgb(61, 83, seed=11)
    return {
        "ycbcr-420-base": encode(pixels, quality=85),
        "ycbcr-444-progressive": encode(pixels, quality=90, subsampling=0, progressive=True),
        "ycbcr-422-restart": encode(pixels, quality=90, subsampling=1, restart_marker_rows=1),
        "gray-base": encode(pixels, mode="L", quality=90),
        "cmyk-base": encode(pixels, mode="CMYK", quality=90),
    }
