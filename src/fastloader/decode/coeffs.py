"""Coeffs records (issue 30): a JPEG's quantized coefficients, stored for fast, crop-aware decoding.

A record starts with the magic b"FLCOEF" and a version byte (the layout is csrc/coeffs.h's).
Decoding one gives the bits `decode()` gives the JPEG it came from (at the DCT scale the JPEG
path takes for a large crop and small output, too); it needs the native
extension (there is no Pillow path for these records: repack with `--codec jpeg` to use one).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from fastloader.decode import _native
from fastloader.decode.pillow import ImageHeader
from fastloader.decode.record import Record
from fastloader.errors import DecodeError, NativeUnavailableError

__all__ = ["MAGIC", "decode_record", "encode", "header", "is_coeffs", "native_reason",
           "orientation", "refusal", "to_jpeg"]

MAGIC = b"FLCOEF"
_FIX = "repack the dataset with `packdata --codec jpeg` (or `packdata recode --codec jpeg`)"


def is_coeffs(data: Record) -> bool:
    """Whether bytes-like data starts as a coeffs record does (it may still be damaged)."""
    return bytes(memoryview(data)[:len(MAGIC)]) == MAGIC


def refusal(backend: str) -> str:
    """What a backend that cannot decode coeffs records (DALI, nvJPEG) says about a dataset."""
    return (f"{backend} cannot decode coeffs records (nvJPEG reads JPEG only), and this "
            "dataset holds some: use the native backend (backend='auto'), or convert it for "
            "DALI with `packdata recode SRC DST --codec jpeg` (or pack the images with "
            "`--codec jpeg`, the default)")


def _core_or_none() -> ModuleType | None:
    core = _native.native_module()
    return core if core is not None and hasattr(core, "coeffs_decode_into") else None


def native_reason() -> str:
    """Why coeffs records cannot be decoded here ("" when they can)."""
    if _core_or_none() is not None:
        return ""
    reason = _native.unavailable_reason() or "the extension predates coeffs records (rebuild it)"
    return f"coeffs records need the native extension, but {reason}; or {_FIX}"


def _core() -> ModuleType:
    core = _core_or_none()
    if core is None:
        raise DecodeError(f"cannot decode a coeffs record: {native_reason()}")
    return core


def encode(jpeg: Record, *, seg_mcus: int = 4, nibble_from: int = 10) -> bytes:
    """The coeffs record of a JPEG (its coefficients, losslessly), for `packdata --codec coeffs`.

    Args:
        jpeg: the JPEG's bytes.
        seg_mcus: MCU columns per segment (crops decode whole segments), 1-255.
        nibble_from: the first zigzag position stored as a 4-bit value, 1-64.

    Raises:
        NativeUnavailableError: the native extension is not in use.
        DecodeError: the JPEG is damaged, or of the kind records do not hold (a progressive
            file whose scans stop early, which libjpeg block-smooths): keep it JPEG.
    """
    core = _core_or_none()
    if core is None:
        raise NativeUnavailableError(f"cannot make coeffs records: {native_reason()}")
    try:
        core.header(jpeg)  # the JPEG path's header rules (Pillow's marker walk) come first
        return bytes(core.coeffs_encode(jpeg, seg_mcus=seg_mcus, nibble_from=nibble_from))
    except ValueError as exc:
        raise DecodeError(f"cannot store this JPEG as a coeffs record: {exc}") from exc


def to_jpeg(record: Record) -> bytes:
    """The JPEG of a record's coefficients (and its EXIF orientation): decodes to the record's
    pixels, for `packdata recode --codec jpeg` (DALI, sharing). Not the source file's bytes:
    baseline, optimised Huffman tables, no other metadata.

    Raises:
        DecodeError: the record is damaged, or the native extension is not in use.
    """
    try:
        return bytes(_core().coeffs_to_jpeg(record))
    except ValueError as exc:
        raise DecodeError(f"cannot write coeffs record ({len(record)} bytes) as JPEG: {exc}"
                          ) from exc


def _info(data: Record) -> tuple[int, int, int, str, str, int, int]:
    try:
        info: tuple[int, int, int, str, str, int, int] = tuple(_core().coeffs_info(data))
        return info
    except ValueError as exc:
        raise DecodeError(f"cannot read coeffs record ({len(data)} bytes): {exc}") from exc


def header(data: Record) -> ImageHeader:
    """The ImageHeader of a coeffs record (progressive is False: records have no scans)."""
    width, height, components, color, subsampling, _, _ = _info(data)
    return ImageHeader(width, height, components, color, subsampling, False)


def orientation(data: Record) -> int:
    """The EXIF orientation (1-8) of the JPEG a record came from, 0 when it had none: records
    keep the stored pixels and this one value of the JPEG's metadata."""
    return _info(data)[6]


def decode_record(data: Record, box: tuple[int, int, int, int] | None,
                  size: tuple[int, int] | None, flip: bool) -> np.ndarray:
    """Decode a coeffs record, cropped to box, resized to size and mirrored (decode()'s rules,
    DCT scaling included)."""
    core = _core()
    hdr = header(data)
    full = box or (0, 0, hdr.height, hdr.width)
    out = np.empty((*(size or full[2:]), 3), np.uint8)
    error = core.coeffs_decode_into(data, full, bool(flip), out)
    if error is not None:
        raise DecodeError(f"cannot decode coeffs record ({len(data)} bytes): {error}")
    return out
