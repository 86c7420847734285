"""Decode-aware packing: lossless restart-tile repack of JPEGs and crop splicing (Python face).

A tiled record is the same JPEG re-encoded losslessly at the coefficient level as a sequential
JPEG with a restart marker every R MCUs (R divides the MCUs per row). Its TileTable says where
every restart segment starts, so a crop can be decoded from a small JPEG spliced together from
only the segments it needs. Layout rules are documented in csrc/tiles.h.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from fastloader.decode import _native
from fastloader.errors import (
    CorruptRecordError,
    DecodeError,
    NativeUnavailableError,
    invalid_argument,
    invalid_type,
)

if TYPE_CHECKING:
    from fastloader import _core

# Order of TileTable's scalar fields in to_arrays()' header row; the same as the extension's
# TileGeometry.fields (the C++ Geometry), which tests/test_native_types.py checks.
HEADER_FIELDS: tuple[str, ...] = (
    "width",
    "height",
    "sof_offset",
    "scan_offset",
    "mcu_width",
    "mcu_height",
    "mcus_per_row",
    "mcu_rows",
    "restart_mcus",
)
# 2-4 MCUs per segment measured best (DESIGN.md); 2 against 4 on bench_make_images data:
# spliced RRC-224 decode 0.944 vs 0.986 ms/img, the loader 1713 vs 1629 img/s, records +0.6%.
# (1 MCU decoded no faster than 2 and made records 1.4% larger.)
DEFAULT_RESTART_MCUS = 2
UPSAMPLING_CONTEXT = 1  # pixels around the crop that chroma upsampling reads

_STATUS_OK, _STATUS_NOT_TILEABLE, _STATUS_CORRUPT, _STATUS_INVALID = 0, 1, 2, 3
_BUILD_HINT = (
    "Tiles need the compiled extension: run `make install` (or `pip install "
    "--no-build-isolation -e .` in the source tree) with the libjpeg-turbo headers installed "
    "(Debian/Ubuntu: libjpeg62-turbo-dev), and unset FASTLOADER_DISABLE_NATIVE."
)


def require_extension() -> None:
    """Check that the extension holding the tiles functions is usable, or raise
    NativeUnavailableError. Goes through fastloader.decode._native like the decoder, so the
    same version check applies; callers then import fastloader._core, typed by _core.pyi."""
    module = _native.native_module()
    if module is None:
        raise NativeUnavailableError(f"{_native.unavailable_reason()}. {_BUILD_HINT}")
    if not hasattr(module, "tiles_splice_into"):
        raise NativeUnavailableError(f"fastloader._core is a stale build. {_BUILD_HINT}")


def _as_bytes_array(data: object, name: str = "data") -> np.ndarray:
    """Zero-copy uint8 view of bytes, bytearray, memoryview or a 1-D uint8 array."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise invalid_type(name, data, "bytes or a 1-D uint8 array")
        return np.ascontiguousarray(data)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(data, np.uint8)
    raise invalid_type(name, data, "bytes, bytearray, memoryview or a 1-D uint8 array")


@dataclass(frozen=True, eq=False)
class TileTable:
    """Where a tiled record's restart segments lie, plus its MCU geometry.

    Segment k (k = 0..n-1, row-major over mcu_rows x mcus_per_row/restart_mcus) is the entropy
    data ``record[offsets[k] : offsets[k+1] - 2]``; the two bytes before ``offsets[k+1]`` are its
    marker (RST(k mod 8), or EOI for the last). ``offsets[0] == scan_offset`` and
    ``offsets[-1] == len(record)``.
    """

    width: int
    height: int
    sof_offset: int
    scan_offset: int
    mcu_width: int
    mcu_height: int
    mcus_per_row: int
    mcu_rows: int
    restart_mcus: int
    offsets: np.ndarray  # uint32, n_segments + 1

    @property
    def segments_per_row(self) -> int:
        return self.mcus_per_row // self.restart_mcus

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(header int64[9] in HEADER_FIELDS order, offsets uint32[n+1]) for a .npy index."""
        header = np.array([getattr(self, name) for name in HEADER_FIELDS], np.int64)
        return header, np.ascontiguousarray(self.offsets, np.uint32)

    @classmethod
    def from_arrays(cls, header: np.ndarray, offsets: np.ndarray) -> TileTable:
        """Rebuild a table from to_arrays()' output; CorruptRecordError if it cannot be one."""
        header = np.asarray(header)
        offsets = np.asarray(offsets)
        if header.shape != (len(HEADER_FIELDS),) or header.dtype.kind not in "iu":
            raise CorruptRecordError(
                f"tile table header must be {len(HEADER_FIELDS)} integers, got shape "
                f"{header.shape} dtype {header.dtype}; re-pack the dataset with tiles."
            )
        if offsets.ndim != 1 or offsets.dtype != np.uint32 or offsets.size < 2:
            raise CorruptRecordError(
                f"tile offsets must be a 1-D uint32 array of at least 2 values, got shape "
                f"{offsets.shape} dtype {offsets.dtype}; re-pack the dataset with tiles."
            )
        values = {name: int(v) for name, v in zip(HEADER_FIELDS, header.tolist(), strict=True)}
        table = cls(**values, offsets=offsets)
        table._check_geometry()
        return table

    def _check_geometry(self) -> None:
        """Cheap self-consistency check (the splice checks the bytes it touches)."""
        scalars = [getattr(self, name) for name in HEADER_FIELDS]
        ok = all(0 < v < 2**32 for v in scalars) and (
            self.mcus_per_row == -(-self.width // self.mcu_width)
            and self.mcu_rows == -(-self.height // self.mcu_height)
            and self.mcus_per_row % self.restart_mcus == 0
            and self.offsets.size == self.mcu_rows * self.segments_per_row + 1
            and int(self.offsets[0]) == self.scan_offset
        )
        if not ok:
            raise CorruptRecordError(
                f"tile table is inconsistent ({dict(zip(HEADER_FIELDS, scalars, strict=True))}, "
                f"{self.offsets.size} offsets); re-pack the dataset with tiles."
            )


class TileBatch(NamedTuple):
    """A batch's tile tables in the form BatchDecoder.decode_into(..., tiles=) takes.

    Row k of headers is record k's header in HEADER_FIELDS order (all zeros: not tiled); its
    offsets are ``offsets[spans[k, 0] : spans[k, 1]]``. offsets may be a whole dataset's
    flat array (memory-mapped), so gathering a batch copies only 11 numbers per sample.
    """

    headers: np.ndarray  # (k, 9) int64
    offsets: np.ndarray  # 1-D uint32
    spans: np.ndarray  # (k, 2) uint64

    @classmethod
    def gather(
        cls, headers: np.ndarray, offsets: np.ndarray, starts: np.ndarray,
        indices: np.ndarray | Sequence[int]
    ) -> TileBatch:
        """The batch for `indices` from dataset-wide arrays (starts: (n+1,) prefix sums)."""
        rows = np.asarray(indices, np.int64)
        spans = np.stack([starts[rows], starts[rows + 1]], 1).astype(np.uint64, copy=False)
        return cls(np.ascontiguousarray(headers[rows], np.int64), offsets, spans)

    @classmethod
    def from_tables(cls, tables: Sequence[TileTable | None]) -> TileBatch:
        """A batch from per-record tables (None: that record is not tiled)."""
        headers = np.zeros((len(tables), len(HEADER_FIELDS)), np.int64)
        chunks: list[np.ndarray] = []
        spans = np.zeros((len(tables), 2), np.uint64)
        at = 0
        for k, table in enumerate(tables):
            if table is not None:
                headers[k], flat = table.to_arrays()
                chunks.append(flat)
                spans[k] = (at, at + flat.size)
                at += flat.size
        offsets = np.concatenate(chunks) if chunks else np.zeros(0, np.uint32)
        return cls(headers, offsets, spans)


@dataclass(frozen=True, eq=False)
class TiledRecord:
    """A losslessly repacked JPEG and its segment table."""

    data: bytes
    table: TileTable


def _table_from(geometry: _core.TileGeometry, offsets: np.ndarray) -> TileTable:
    """A TileTable from the extension's TileGeometry (fields by name) and offsets."""
    values = {name: int(getattr(geometry, name)) for name in HEADER_FIELDS}
    return TileTable(**values, offsets=offsets)


def _geometry_of(table: TileTable) -> _core.TileGeometry:
    """The extension's TileGeometry for a table; CorruptRecordError for values no real table
    holds (outside uint32)."""
    values = {name: getattr(table, name) for name in HEADER_FIELDS}
    if not all(isinstance(v, (int, np.integer)) and 0 <= v <= 0xFFFFFFFF for v in values.values()):
        raise CorruptRecordError(
            f"tile table header values must be integers in uint32 range, got {values}; "
            "re-pack the dataset with tiles."
        )
    require_extension()
    from fastloader import _core

    return _core.TileGeometry(**{name: int(v) for name, v in values.items()})


def check_restart_mcus(restart_mcus: object) -> int:
    """The largest restart interval R to use: restart_mcus checked, None meaning the default."""
    limit = DEFAULT_RESTART_MCUS if restart_mcus is None else restart_mcus
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise invalid_type("restart_mcus", restart_mcus, "an int or None")
    if not 1 <= limit <= 65535:
        raise invalid_argument(
            "restart_mcus", restart_mcus, "must be in 1..65535",
            f"Use 2-4 (or None for {DEFAULT_RESTART_MCUS}).",
        )
    return limit


def repack_with_reason(
    data: object, *, restart_mcus: int | None = None, keep_metadata: bool = False
) -> tuple[TiledRecord | None, str]:
    """Repack data as a tiled record, or (None, why not) when it cannot be tiled.

    restart_mcus is the largest R allowed (default DEFAULT_RESTART_MCUS, 2); the R used is the
    largest divisor of the MCUs per row that is <= it. keep_metadata keeps every APPn/COM
    marker (EXIF, ICC, XMP); by default only JFIF APP0 and Adobe APP14, the markers that decide
    decoded colours, stay.
    Damaged sources, arithmetic coding, lossless or 12-bit JPEGs and non-JPEGs return None.
    """
    limit = check_restart_mcus(restart_mcus)
    array = _as_bytes_array(data)
    require_extension()
    from fastloader import _core

    status, message, out, geometry, offsets = _core.tiles_repack(array, limit, keep_metadata)
    if status != _STATUS_OK:
        return None, message
    return TiledRecord(out, _table_from(geometry, offsets)), ""


def repack(
    data: object, *, restart_mcus: int | None = None, keep_metadata: bool = False
) -> TiledRecord | None:
    """Repack data as a tiled record; None when it cannot be tiled (keep the original bytes)."""
    return repack_with_reason(data, restart_mcus=restart_mcus, keep_metadata=keep_metadata)[0]


def scan(data: object) -> TileTable:
    """Read the table of a tiled record by scanning its bytes; CorruptRecordError if not one."""
    require_extension()
    from fastloader import _core

    status, message, geometry, offsets = _core.tiles_scan(_as_bytes_array(data))
    if status != _STATUS_OK:
        raise CorruptRecordError(f"not a valid tiled record: {message}.")
    return _table_from(geometry, offsets)


def _check_crop(crop: object, table: TileTable) -> tuple[int, int, int, int]:
    if not isinstance(crop, (tuple, list)) or len(crop) != 4:
        raise invalid_type("crop", crop, "a (top, left, height, width) tuple of ints")
    top, left, height, width = (int(v) for v in crop)
    if (
        top < 0
        or left < 0
        or height < 1
        or width < 1
        or top + height > table.height
        or (left + width > table.width)
    ):
        raise invalid_argument(
            "crop",
            tuple(crop),
            f"must be a non-empty box inside the {table.height}x{table.width} image",
            "Clamp the box to the image.",
        )
    return top, left, height, width


def splice_into(
    data: object, table: TileTable, crop: Sequence[int], out: np.ndarray, *,
    context: int = UPSAMPLING_CONTEXT,
) -> tuple[int, tuple[int, int, int, int]]:
    """Splice the JPEG covering crop into out (uint8, len >= len(data)).

    Returns (bytes written, (y0, x0, height, width) of the spliced image in source pixels).
    """
    top, left, height, width = _check_crop(crop, table)
    offsets = np.ascontiguousarray(table.offsets, np.uint32)
    from fastloader import _core  # _geometry_of checked it is usable

    status, message, size, y0, x0, h, w = _core.tiles_splice_into(
        _as_bytes_array(data), _geometry_of(table), offsets, top, left, height, width, context,
        out,
    )
    if status == _STATUS_INVALID:
        raise invalid_argument("out", f"<{out.size} bytes>", message, "Pass len(data) bytes.")
    if status != _STATUS_OK:
        raise CorruptRecordError(f"tiled record does not match its table: {message}.")
    return size, (y0, x0, h, w)


def splice(
    data: object, table: TileTable, crop: Sequence[int], *, context: int = UPSAMPLING_CONTEXT
) -> tuple[bytes, tuple[int, int]]:
    """A small valid JPEG covering crop, and its origin (y0, x0) in source pixels."""
    array = _as_bytes_array(data)
    out = np.empty(array.size, np.uint8)
    size, (y0, x0, _, _) = splice_into(array, table, crop, out, context=context)
    return out[:size].tobytes(), (y0, x0)


def decode_crop(data: object, table: TileTable, crop: Sequence[int], *, mode: str = "RGB"
                ) -> np.ndarray:
    """Decode only crop (top, left, height, width) of a tiled record to an HxWxC uint8 array."""
    from PIL import Image

    top, left, height, width = _check_crop(crop, table)
    jpeg, (y0, x0) = splice(data, table, crop)
    try:
        with Image.open(io.BytesIO(jpeg)) as image:
            pixels = np.asarray(image.convert(mode))
    except (OSError, ValueError) as exc:
        raise DecodeError(f"spliced crop {tuple(crop)} did not decode: {exc}.") from exc
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return pixels[top - y0 : top - y0 + height, left - x0 : left - x0 + width]
