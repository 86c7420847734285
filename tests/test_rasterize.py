"""pack/rasterize: COCO polygons and RLE (both encodings) into semantic masks, checked against
independent references: point-in-polygon at pixel centres, Pillow's polygon fill, and strings
and masks pycocotools 2.0.11 produced (kept here as constants; it is no dependency)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from fastloader.pack.sources.rasterize import (
    IGNORE,
    BadSegmentation,
    Instance,
    counts_to_string,
    decode_rle,
    mask_to_counts,
    polygons_to_mask,
    semantic_mask,
    string_to_counts,
)

pytestmark = pytest.mark.native_neutral


def _shape(rng: np.random.Generator, height: int, width: int, radius: tuple[float, float]
           ) -> list[float]:
    """A random star-shaped polygon (often concave), possibly crossing the image's edges."""
    n = int(rng.integers(5, 30))
    cx, cy = rng.uniform(-0.1 * width, 1.1 * width), rng.uniform(-0.1 * height, 1.1 * height)
    angles = np.sort(rng.uniform(0, 2 * np.pi, n))
    r = rng.uniform(*radius) * rng.uniform(0.4, 1.0, n)
    return np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], 1).ravel().tolist()


def _inside_centres(flat: list[float], height: int, width: int) -> np.ndarray:
    """Even-odd ray casting at every pixel centre (x + 0.5, y + 0.5), written plainly."""
    pts = np.asarray(flat).reshape(-1, 2)
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    inside = np.zeros((height, width), bool)
    for (x0, y0), (x1, y1) in zip(pts, np.roll(pts, -1, axis=0), strict=True):
        if y0 == y1:
            continue
        spans = (y0 > ys) != (y1 > ys)
        cross = x0 + (ys - y0) * (x1 - x0) / (y1 - y0)
        inside ^= spans & (xs < cross)
    return inside


def test_polygons_sample_pixel_centres_exactly() -> None:
    rng = np.random.default_rng(3)
    for _ in range(60):
        height, width = int(rng.integers(5, 50)), int(rng.integers(5, 50))
        flat = _shape(rng, height, width, (3, 30))
        np.testing.assert_array_equal(polygons_to_mask([flat], height, width),
                                      _inside_centres(flat, height, width))


def test_polygon_parts_are_united_not_xored() -> None:
    outer = [2, 2, 18, 2, 18, 18, 2, 18]
    inner = [6, 6, 12, 6, 12, 12, 6, 12]  # inside the outer part: still filled (union)
    mask = polygons_to_mask([outer, inner], 20, 20)
    assert mask[8, 8] and mask[3, 3] and mask.sum() == 16 * 16
    assert not polygons_to_mask([[1, 1, 5, 5]], 10, 10).any()  # under 3 points: no area


def _near_edge(mask: np.ndarray) -> np.ndarray:
    """Pixels within one pixel (8-neighbourhood) of the mask's edge."""
    padded = np.pad(mask, 1, mode="edge")
    height, width = mask.shape
    shifts = [padded[1 + dy:1 + dy + height, 1 + dx:1 + dx + width]
              for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
    return np.any(shifts, axis=0) & ~np.all(shifts, axis=0)


def test_polygons_agree_with_pillow_on_98_percent() -> None:
    rng = np.random.default_rng(5)
    height, width = 480, 640
    union = differ = 0
    for _ in range(30):
        parts = [_shape(rng, height, width, (60, 200)) for _ in range(int(rng.integers(1, 3)))]
        ours = polygons_to_mask(parts, height, width)
        image = Image.new("L", (width, height))
        draw = ImageDraw.Draw(image)
        for flat in parts:  # Pillow's pixel centres are at integers: shift by half a pixel
            draw.polygon([(x - 0.5, y - 0.5) for x, y in zip(flat[0::2], flat[1::2],
                                                              strict=True)], fill=1)
        theirs = np.asarray(image).astype(bool)
        union += int((ours | theirs).sum())
        differ += int((ours ^ theirs).sum())
        assert not ((ours ^ theirs) & ~_near_edge(ours) & ~_near_edge(theirs)).any()  # edges only
    assert union > 500_000 and differ / union < 0.02, differ / union


def test_polygons_match_pycocotools_output() -> None:
    """Masks pycocotools.mask.frPyObjects + merge + encode gave for these polygons."""
    cases = [
        ([[10.3, 5.2, 30.8, 8.1, 25.5, 28.9, 12.2, 22.4, 18.0, 15.0], [2, 2, 6, 2, 6, 6]],
         "R31o01O1R5OnJ100^OO32J062G081F0:1D1;:10O001O001O0010K4L4L4L4Ll8", 10),
        ([[-5, -3, 45.2, 1.5, 38.7, 35, 0.4, 29.6]],
         "0n020000000000001O000000000000Qb00o]O00000000000O0", 1),
    ]
    for parts, counts, tolerance in cases:
        theirs = decode_rle({"counts": counts, "size": [32, 40]}, 32, 40)
        ours = polygons_to_mask(parts, 32, 40)
        assert int((ours ^ theirs).sum()) <= tolerance  # edge pixels: their 1/5-pixel grid


def _runs(mask: np.ndarray) -> list[int]:
    """COCO run lengths written the slow, obvious way (column-major, 0-run first)."""
    runs, value, count = [], False, 0
    for pixel in mask.T.reshape(-1):
        if bool(pixel) != value:
            runs.append(count)
            value, count = bool(pixel), 0
        count += 1
    return [*runs, count]


def test_rle_strings_from_pycocotools_decode_exactly() -> None:
    m1 = np.zeros((6, 7), bool)
    m1[1:4, 2:6] = True
    m1[5, 0] = True
    m2 = np.zeros((40, 30), bool)
    m2[3:37, 4:26] = True
    m2[10:14, :] = False
    m2[:, 12:14] = False
    m3 = np.ones((5, 4), bool)
    m3[0, 0] = m3[2, 1] = False
    m4 = np.zeros((70, 1), bool)
    m4[1:69] = True  # a 68-pixel run: a number over several characters
    strings = ["5172L000005",
               "S574`02@N`02@N`02@N`02@N`02@N`02@N`02@N`0b2@^M`02@N`02@N`02@N`02@N`02@N"
               "`02@N`02@N`02@N`02@N`02@N`02@N`0o4", "1616", "1T21"]
    for mask, text in zip((m1, m2, m3, m4), strings, strict=True):
        height, width = mask.shape
        np.testing.assert_array_equal(decode_rle({"counts": text, "size": [height, width]},
                                                 height, width), mask)
        assert string_to_counts(text).tolist() == _runs(mask)
        assert counts_to_string(_runs(mask)) == text
        np.testing.assert_array_equal(
            decode_rle({"counts": _runs(mask), "size": [height, width]}, height, width), mask)


def test_rle_round_trip_of_random_masks() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        height, width = int(rng.integers(1, 60)), int(rng.integers(1, 60))
        mask = rng.random((height, width)) < rng.uniform(0, 1)
        counts = mask_to_counts(mask)
        assert counts.tolist() == _runs(mask)
        for encoded in (counts.tolist(), counts_to_string(counts),
                        counts_to_string(counts).encode()):
            np.testing.assert_array_equal(
                decode_rle({"counts": encoded, "size": [height, width]}, height, width), mask)


@pytest.mark.parametrize("rle, needle", [
    ({"counts": "5172L00000", "size": [6, 7]}, "add up to"),
    ({"counts": "5172L000005", "size": [7, 6]}, "differs from the image"),
    ({"counts": "51~2", "size": [6, 7]}, "'~' at 2"),
    ({"counts": "51n", "size": [6, 7]}, "ends inside a number"),
    ({"counts": [3, -1, 40], "size": [6, 7]}, "negative run"),
    ({"counts": [1.5, 40.5], "size": [6, 7]}, "list of ints"),
])
def test_bad_rle_says_what_is_wrong(rle: dict, needle: str) -> None:
    with pytest.raises(BadSegmentation, match=needle):
        decode_rle(rle, 6, 7)


def test_semantic_mask_order_crowd_and_bad_input() -> None:
    big = [[0, 0, 20, 0, 20, 20, 0, 20]]
    small = [[5, 5, 10, 5, 10, 10, 5, 10]]
    crowd = mask_to_counts(np.pad(np.ones((4, 4), bool), ((0, 16), (16, 0))))
    out = semantic_mask([Instance(3, False, small, 1), Instance(1, False, big, 2),
                         Instance(0, True, {"counts": crowd.tolist(), "size": [20, 20]}, 3)],
                        20, 20)
    assert out.dtype == np.uint8 and out.shape == (20, 20)
    assert out[7, 7] == 4  # the small object is painted after (over) the larger one
    assert out[1, 1] == 2 and out[15, 15] == 2
    assert (out[0:4, 16:20] == 2).all()  # an object wins over a crowd region
    alone = semantic_mask([Instance(0, True, {"counts": crowd.tolist(), "size": [20, 20]}, 3)],
                          20, 20)
    assert (alone[0:4, 16:20] == IGNORE).all() and alone.sum() == 16 * IGNORE
    assert not semantic_mask([], 4, 5).any()
    with pytest.raises(BadSegmentation, match="annotation 9: polygon"):
        semantic_mask([Instance(0, False, [[1, 2, 3]], 9)], 5, 5)
    with pytest.raises(BadSegmentation, match="annotation 8: segmentation is str"):
        semantic_mask([Instance(0, False, "x", 8)], 5, 5)
    with pytest.raises(BadSegmentation, match="does not fit a uint8 mask"):
        semantic_mask([Instance(254, False, small, 7)], 20, 20)
