"""Restart-tile repack is lossless and spliced crops decode to the full image's pixels."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from fastloader.decode import tiles
from helpers import pillow_pixels
from imagegen import encode, photo_like

pytestmark = [pytest.mark.native, pytest.mark.wheel]

# name -> (height, width, encode options); every subsampling Pillow writes, plus colour models.
VARIANTS: dict[str, tuple[int, int, dict[str, object]]] = {
    "420": (75, 101, {"subsampling": "4:2:0"}),
    "422": (67, 90, {"subsampling": "4:2:2"}),
    "444": (50, 77, {"subsampling": "4:4:4"}),
    "gray": (61, 83, {"mode": "L"}),
    "cmyk": (45, 70, {"mode": "CMYK"}),
    "rgb_adobe": (40, 56, {"keep_rgb": True, "subsampling": "4:4:4"}),
    "progressive": (70, 99, {"progressive": True}),
    "progressive_gray": (33, 47, {"progressive": True, "mode": "L"}),
}
ODD_SIZES = [(1, 1), (7, 13), (17, 300), (333, 500)]


def make_jpeg(height: int, width: int, seed: int = 0, **options: object) -> bytes:
    mode = str(options.pop("mode", "RGB"))
    return encode(photo_like(height, width, seed), mode=mode, quality=90, **options)


def pixels(data: bytes) -> np.ndarray:
    array = pillow_pixels(data)
    return array if array.ndim == 3 else array[:, :, None]


def native_mode(data: bytes) -> str:
    with Image.open(io.BytesIO(data)) as image:
        return image.mode


def random_boxes(height: int, width: int, count: int, seed: int) -> list[tuple[int, ...]]:
    """Random boxes plus boxes touching each edge and corner, and the whole image."""
    rng = np.random.default_rng(seed)
    boxes: list[tuple[int, ...]] = [(0, 0, height, width)]
    for _ in range(count):
        h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        boxes.append(
            (int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w)
        )
    h, w = max(1, height // 3), max(1, width // 3)
    for top in (0, height - h):
        for left in (0, width - w, (width - w) // 2):
            boxes.append((top, left, h, w))
    boxes += [(0, 0, 1, 1), (height - 1, width - 1, 1, 1), (height // 2, 0, 1, width)]
    return boxes


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_repack_is_lossless(name: str) -> None:
    height, width, options = VARIANTS[name]
    source = make_jpeg(height, width, seed=len(name), **options)
    record = tiles.repack(source)
    assert record is not None
    assert native_mode(record.data) == native_mode(source)
    np.testing.assert_array_equal(pixels(record.data), pixels(source))


@pytest.mark.parametrize(("height", "width"), ODD_SIZES)
@pytest.mark.parametrize("subsampling", ["4:2:0", "4:2:2", "4:4:4"])
def test_odd_sizes_are_lossless(height: int, width: int, subsampling: str) -> None:
    source = make_jpeg(height, width, seed=height + width, subsampling=subsampling)
    record = tiles.repack(source)
    assert record is not None
    np.testing.assert_array_equal(pixels(record.data), pixels(source))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_spliced_crops_equal_full_decode(name: str) -> None:
    height, width, options = VARIANTS[name]
    record = tiles.repack(make_jpeg(height, width, seed=3, **options))
    assert record is not None
    full = pixels(record.data)
    mode = native_mode(record.data)
    for box in random_boxes(height, width, 40, seed=len(name)):
        top, left, h, w = box
        crop = tiles.decode_crop(record.data, record.table, box, mode=mode)
        # margin 0: the whole crop, edges included, equals the full decode
        np.testing.assert_array_equal(crop, full[top : top + h, left : left + w], err_msg=str(box))


@pytest.mark.parametrize(("height", "width"), ODD_SIZES)
def test_spliced_crops_on_odd_sizes(height: int, width: int) -> None:
    record = tiles.repack(make_jpeg(height, width, seed=5, subsampling="4:2:0"))
    assert record is not None
    full = pixels(record.data)
    for top, left, h, w in random_boxes(height, width, 15, seed=height):
        crop = tiles.decode_crop(record.data, record.table, (top, left, h, w))
        np.testing.assert_array_equal(crop, full[top : top + h, left : left + w])


def test_splice_region_is_aligned_and_small() -> None:
    record = tiles.repack(make_jpeg(375, 500, seed=7))
    assert record is not None
    table = record.table
    assert (table.mcu_width, table.mcu_height, table.mcus_per_row, table.mcu_rows) == (
        16,
        16,
        32,
        24,
    )
    assert table.restart_mcus == 2
    jpeg, (y0, x0) = tiles.splice(record.data, table, (100, 130, 50, 60))
    assert (y0, x0) == (96, 128)
    with Image.open(io.BytesIO(jpeg)) as image:
        assert image.size == (64, 64)  # two 32-px segments wide, 4 MCU rows high
    assert len(jpeg) < len(record.data) / 8
    # a crop edge on a segment boundary pulls in the neighbour segment for upsampling context
    _, (y0, x0) = tiles.splice(record.data, table, (96, 128, 50, 60))
    assert (y0, x0) == (80, 96)  # one MCU row up, one 32-px segment left
    _, (y0, x0) = tiles.splice(record.data, table, (96, 128, 50, 60), context=0)
    assert (y0, x0) == (96, 128)
    jpeg, (y0, x0) = tiles.splice(record.data, table, (300, 450, 75, 50))
    with Image.open(io.BytesIO(jpeg)) as image:
        assert image.size == (500 - 448, 375 - 288)  # partial last MCU column and row


@pytest.mark.parametrize(
    ("width", "limit", "expected"), [(500, 4, 4), (500, 3, 2), (208, 4, 1), (48, 4, 3)]
)
def test_restart_interval_divides_the_mcu_row(width: int, limit: int, expected: int) -> None:
    record = tiles.repack(make_jpeg(32, width), restart_mcus=limit)
    assert record is not None
    assert record.table.restart_mcus == expected
    assert record.table.mcus_per_row % expected == 0


def test_table_round_trips_through_arrays_and_scan() -> None:
    record = tiles.repack(make_jpeg(90, 120, subsampling="4:2:2"))
    assert record is not None
    header, offsets = record.table.to_arrays()
    assert header.dtype == np.int64 and header.shape == (len(tiles.HEADER_FIELDS),)
    assert offsets.dtype == np.uint32 and offsets[-1] == len(record.data)
    again = tiles.TileTable.from_arrays(header, offsets)
    scanned = tiles.scan(record.data)
    for table in (again, scanned):
        np.testing.assert_array_equal(table.to_arrays()[0], header)
        np.testing.assert_array_equal(table.offsets, offsets)


def test_metadata_markers_are_kept_only_when_asked() -> None:
    source = make_jpeg(40, 40, comment=b"keep me")
    assert b"keep me" in source
    plain = tiles.repack(source)
    kept = tiles.repack(source, keep_metadata=True)
    assert plain is not None and kept is not None
    assert b"keep me" not in plain.data and b"keep me" in kept.data
    assert b"JFIF" in plain.data


def test_untileable_inputs_give_a_reason() -> None:
    png = encode(photo_like(20, 20, 0), fmt="PNG")
    record, reason = tiles.repack_with_reason(png)
    assert record is None and "Not a JPEG" in reason
    truncated = make_jpeg(64, 64)[:-200]
    record, reason = tiles.repack_with_reason(truncated)
    assert record is None and "damaged" in reason
    assert tiles.repack(b"") is None
