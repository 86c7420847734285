"""The typed native boundary: named classes for the JPEG header and tile geometry, keyword-only
options, and the generated _core.pyi stub that mypy reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fastloader.decode import _native, tiles
from helpers import make_batch
from imagegen import encode, photo_like

pytestmark = [pytest.mark.native, pytest.mark.wheel]
STUB = Path(__file__).resolve().parent.parent / "src" / "fastloader" / "_core.pyi"


def test_header_is_a_class_with_named_fields() -> None:
    core = _native.require_native()
    h = core.header(encode(photo_like(37, 53, 1), quality=90, progressive=True))
    assert isinstance(h, core.JpegHeader)
    assert (h.width, h.height, h.components) == (53, 37, 3)
    assert (h.color_space, h.subsampling, h.progressive) == ("ycbcr", "4:2:0", True)
    assert "width=53" in repr(h)
    with pytest.raises(AttributeError):
        h.width = 1  # read-only


def test_tile_geometry_names_the_fields_in_the_index_order() -> None:
    core = _native.require_native()
    assert core.TileGeometry.fields == tiles.HEADER_FIELDS
    record = tiles.repack(encode(photo_like(40, 70, 2)))
    assert record is not None
    values = {name: getattr(record.table, name) for name in tiles.HEADER_FIELDS}
    geometry = core.TileGeometry(**values)
    assert all(getattr(geometry, name) == value for name, value in values.items())
    with pytest.raises(TypeError):
        core.TileGeometry(*values.values())  # keyword-only: no order kept by hand


def test_optional_arguments_are_keyword_only() -> None:
    core = _native.require_native()
    data = encode(photo_like(20, 20, 3))
    out = np.empty((8, 8, 3), np.uint8)
    assert core.decode_into(data, (0, 0, 20, 20), False, out, dct_scaling=False) is None
    with pytest.raises(TypeError):
        core.decode_into(data, (0, 0, 20, 20), False, out, False)
    records, crops, flips = make_batch(2)
    batch = np.empty((2, 8, 8, 3), np.uint8)
    decoder = core.BatchDecoder(1)
    errors, _ = decoder.decode_into(records, crops, flips, batch, dct_scaling=True)
    assert errors == [None, None]
    with pytest.raises(TypeError):
        decoder.decode_into(records, crops, flips, batch, True)
    decoder.close()


def test_the_build_generates_the_stub_mypy_reads() -> None:
    assert STUB.exists(), "make install generates src/fastloader/_core.pyi (nanobind stubgen)"
    text = STUB.read_text()
    for name in ("class JpegHeader", "class TileGeometry", "class BatchDecoder",
                 "def header(", "def decode_into(", "def tiles_splice_into("):
        assert name in text, name
    assert "*, dct_scaling: bool = True" in text
    # Results are typed tuples, so mypy knows each element at the call sites.
    assert "-> tuple[list[str | None], list[int]]" in text
    assert "-> tuple[int, str, bytes, TileGeometry," in text
