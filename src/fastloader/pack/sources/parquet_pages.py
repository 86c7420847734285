"""Where each value of a plain, uncompressed Parquet byte-array column lies in its file.

`datasets` stores an Image() column's bytes uncompressed and PLAIN-encoded: each value is a
4-byte length and the bytes, in data pages. Decoding such a row group with pyarrow in a pool
worker costs 10-75 ms of CPU per 18 MB group in a freshly forked process (fresh buffers, the
allocator's first use), against about 4 ms to pread the same bytes, which is what a CSV's
image files cost. So the parent walks the column's page headers once (a few small reads per
page, and one 4-byte read per value) and hands each cell its byte range; the worker reads
just those bytes, as it reads a tar member.

Only the layout walked here is located: the column uncompressed, no dictionary page, PLAIN
values, a non-repeated column whose definition levels are RLE/bit-packed. Anything else (a
compressed or dictionary-encoded column, a page header this walk cannot parse, a count that
does not add up) returns None, and the cells are read through pyarrow as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

_DATA_PAGE, _INDEX_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 1, 2, 3
_PLAIN, _RLE = 0, 3
_HEADER_READ = 512  # bytes read for a page header first; a longer header is read again
_HEADER_MAX = 1 << 20  # a header longer than this is not walked


class _Unwalkable(Exception):
    """The column chunk is not laid out as this walk reads it."""


class _Compact:
    """A reader of Thrift's compact protocol over bytes (Parquet's page headers)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise IndexError("header runs past the bytes read")
        value = self.data[self.at]
        self.at += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise _Unwalkable("a varint longer than 64 bits")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def struct(self, on_field: Callable[[int, int], bool]) -> None:
        """Read a struct: on_field(id, type) reads a field it knows and returns True, else
        the field is skipped."""
        last = 0
        while (header := self.byte()) != 0:
            kind, delta = header & 0x0F, header >> 4
            field = last + delta if delta else self.zigzag()
            last = field
            if not on_field(field, kind):
                self.skip(kind)

    def skip(self, kind: int) -> None:
        if kind in (1, 2):  # booleans are in the field header
            return
        if kind == 3:
            self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.at += 8
        elif kind == 8:
            length = self.varint()  # read before self.at is (`+=` would load it first)
            self.at += length
        elif kind in (9, 10):
            header = self.byte()
            size = header >> 4 if header >> 4 != 15 else self.varint()
            for _ in range(size):
                self.skip(header & 0x0F)
        elif kind == 11:
            size = self.varint()
            types = self.byte() if size else 0
            for _ in range(size):
                self.skip(types >> 4)
                self.skip(types & 0x0F)
        elif kind == 12:
            self.struct(lambda field, inner: False)
        else:
            raise _Unwalkable(f"unknown thrift type {kind}")


def _page_header(reader: _Compact) -> dict[str, int]:
    """The PageHeader fields the walk needs: type, compressed size, and the data page's
    value count, encodings and (v2) level lengths."""
    found: dict[str, int] = {}
    page_fields = {1: "num_values", 2: "encoding", 3: "def_encoding"}
    v2_fields = {1: "num_values", 2: "num_nulls", 3: "num_rows", 4: "encoding",
                 5: "def_bytes", 6: "rep_bytes"}

    def sub(names: dict[int, str]) -> Callable[[int, int], bool]:
        def on_field(field: int, kind: int) -> bool:
            if field in names and kind == 5:
                found[names[field]] = reader.zigzag()
                return True
            return False
        return on_field

    def top(field: int, kind: int) -> bool:
        if field in (1, 3) and kind == 5:
            found["type" if field == 1 else "size"] = reader.zigzag()
            return True
        if field in (5, 8) and kind == 12:
            reader.struct(sub(page_fields if field == 5 else v2_fields))
            return True
        return False

    reader.struct(top)
    return found


def _header_at(fd: int, at: int, end: int) -> tuple[dict[str, int], int]:
    """The page header at byte `at` and its length."""
    want = _HEADER_READ
    while True:
        data = os.pread(fd, min(want, end - at), at)
        reader = _Compact(data)
        try:
            return _page_header(reader), reader.at
        except IndexError:
            if len(data) < want or want >= _HEADER_MAX:
                raise _Unwalkable("a page header runs past its column chunk") from None
            want *= 8


def _levels_present(data: bytes, count: int, bit_width: int, maximum: int) -> list[bool]:
    """Which of `count` RLE/bit-packed hybrid definition levels equal `maximum`."""
    present: list[bool] = []
    reader = _Compact(data)
    width_bytes = (bit_width + 7) // 8
    mask = (1 << bit_width) - 1
    while len(present) < count:
        header = reader.varint()
        if header & 1:  # bit-packed groups of 8 values
            groups = header >> 1
            chunk = reader.data[reader.at:reader.at + groups * bit_width]
            if len(chunk) < groups * bit_width:
                raise _Unwalkable("definition levels run past their bytes")
            reader.at += groups * bit_width
            bits = int.from_bytes(chunk, "little")
            present += [(bits >> (k * bit_width)) & mask == maximum for k in range(groups * 8)]
        else:  # a run of one value
            value = int.from_bytes(reader.data[reader.at:reader.at + width_bytes], "little")
            reader.at += width_bytes
            present += [value == maximum] * (header >> 1)
    return present[:count]


def _values(fd: int, at: int, end: int, present: list[bool]) -> list[tuple[int, int] | None]:
    """Each level's value range (offset, length) in a PLAIN byte-array page body."""
    ranges: list[tuple[int, int] | None] = []
    for here in present:
        if not here:
            ranges.append(None)
            continue
        head = os.pread(fd, 4, at)
        length = int.from_bytes(head, "little") if len(head) == 4 else -1
        if length < 0 or at + 4 + length > end:
            raise _Unwalkable("a value runs past its page")
        ranges.append((at + 4, length))
        at += 4 + length
    if at != end:
        raise _Unwalkable("a page's values do not fill it")
    return ranges


def _page(fd: int, at: int, header: dict[str, int], end: int, max_def: int
          ) -> list[tuple[int, int] | None]:
    """The value ranges of one data page whose body starts at `at` and ends at `end`."""
    if header.get("encoding") != _PLAIN:
        raise _Unwalkable("values not PLAIN-encoded")
    count = header.get("num_values", -1)
    if count < 0:
        raise _Unwalkable("a data page without its value count")
    bit_width = max_def.bit_length()
    if header["type"] == _DATA_PAGE_V2:
        if header.get("rep_bytes", 0):
            raise _Unwalkable("repetition levels")
        level_bytes = header.get("def_bytes", 0)
        levels, start = os.pread(fd, level_bytes, at), at + level_bytes
    elif max_def:
        if header.get("def_encoding") != _RLE:
            raise _Unwalkable("definition levels not RLE-encoded")
        length = int.from_bytes(os.pread(fd, 4, at), "little")
        levels, start = os.pread(fd, length, at + 4), at + 4 + length
    else:
        levels, start = b"", at
    present = _levels_present(levels, count, bit_width, max_def) if max_def else [True] * count
    return _values(fd, start, end, present)


def value_ranges(path: str, metadata: Any, schema: Any, row_group: int, column: int
                 ) -> list[tuple[int, int] | None] | None:
    """Each row's (offset, length) of the leaf column `column` in this row group (None for a
    null value), or None if the column chunk is not a plain, uncompressed byte-array column
    this walk reads (pyarrow reads it then)."""
    chunk = metadata.row_group(row_group).column(column)
    leaf = schema.column(column)
    if (chunk.compression != "UNCOMPRESSED" or chunk.has_dictionary_page
            or chunk.physical_type != "BYTE_ARRAY" or leaf.max_repetition_level):
        return None
    at, rows = chunk.data_page_offset, metadata.row_group(row_group).num_rows
    end = at + chunk.total_compressed_size
    ranges: list[tuple[int, int] | None] = []
    try:
        with open(path, "rb") as handle:
            fd = handle.fileno()
            while at < end:
                header, length = _header_at(fd, at, end)
                body, size = at + length, header.get("size", -1)
                if size < 0 or body + size > end:
                    raise _Unwalkable("a page runs past its column chunk")
                if header.get("type") in (_DATA_PAGE, _DATA_PAGE_V2):
                    ranges += _page(fd, body, header, body + size, leaf.max_definition_level)
                elif header.get("type") != _INDEX_PAGE:
                    raise _Unwalkable(f"page type {header.get('type')}")
                at = body + size
    except (_Unwalkable, IndexError, OSError):
        return None
    return ranges if len(ranges) == rows else None
