"""COCO segmentations (polygons, uncompressed and compressed RLE) -> one semantic uint8 mask.

Pixel values: 0 background, contiguous class id + 1 for an object (so at most 254 classes),
IGNORE (255) for crowd regions, which segmentation losses skip (`ignore_index=255`): a crowd
region holds many instances of a class with unclear edges, so it is neither that class
everywhere nor background. Painting order: crowd regions first, then the other objects from the
largest (pixel area) to the smallest, ties in annotation order, each painting over what is
there: a small object lying on a large one stays visible, and an object wins over a crowd region.

Polygons are sampled at pixel centres (pixel (x, y) is inside when (x + 0.5, y + 0.5) is inside
the polygon, even-odd within a part, the parts of one object united), the convention
pycocotools approximates with its 5x upsampled boundary walk; a part with fewer than 3 points
has no area. RLE counts are COCO's: alternating runs of 0 and 1 starting with 0, column-major
(down each column, then across), as a list of ints or as COCO's compressed string (LEB128-like,
6 bits a char, ascii 48..111; from the third count on each is stored as its difference to the
count two before it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

IGNORE = 255  # crowd regions: skipped by losses with ignore_index=255
MAX_CLASSES = 254  # class id + 1 must stay below IGNORE


class BadSegmentation(ValueError):
    """A segmentation that cannot be rasterized; the message says what is wrong."""


class Instance(NamedTuple):
    """One annotation to paint: its contiguous class id, crowd flag, COCO segmentation and
    id (for messages)."""

    label: int
    crowd: bool
    segmentation: object  # COCO's polygon list or RLE dict, as read; checked when painted
    ann_id: object  # for messages


def string_to_counts(text: str | bytes) -> np.ndarray:
    """COCO's compressed RLE string -> run lengths (int64); BadSegmentation if malformed."""
    data = text.encode("ascii", "replace") if isinstance(text, str) else bytes(text)
    counts: list[int] = []
    value = shift = 0
    for pos, char in enumerate(data):
        digit = char - 48
        if not 0 <= digit < 64:
            raise BadSegmentation(f"RLE string has {chr(char)!r} at {pos}; COCO's compressed "
                                  "counts use the characters '0' to 'o' only")
        value |= (digit & 0x1F) << shift
        shift += 5
        if digit & 0x20:  # more 5-bit groups follow
            continue
        if digit & 0x10:  # sign bit of the last group: a negative number
            value -= 1 << shift
        if len(counts) > 2:
            value += counts[-2]
        counts.append(value)
        value = shift = 0
    if shift:
        raise BadSegmentation("RLE string ends inside a number (its last character says "
                              "more follow); the counts are truncated")
    return np.asarray(counts, np.int64)


def counts_to_string(counts: Sequence[int] | np.ndarray) -> str:
    """Run lengths -> COCO's compressed RLE string (the inverse of string_to_counts)."""
    values = [int(c) for c in counts]
    out = bytearray()
    for k, count in enumerate(values):
        x = count - values[k - 2] if k > 2 else count
        while True:
            digit = x & 0x1F
            x >>= 5
            more = x != -1 if digit & 0x10 else x != 0
            out.append((digit | (0x20 if more else 0)) + 48)
            if not more:
                break
    return out.decode("ascii")


def mask_to_counts(mask: np.ndarray) -> np.ndarray:
    """A bool/0-1 [H, W] mask -> COCO run lengths (column-major, starting with a 0 run)."""
    flat = np.asarray(mask, bool).T.reshape(-1)
    edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    runs = np.diff(bounds)
    return np.concatenate([[0], runs]) if flat.size and flat[0] else runs


def decode_rle(rle: Mapping[str, object], height: int, width: int) -> np.ndarray:
    """A COCO RLE dict {"counts": [..] or "...", "size": [h, w]} -> bool [h, w];
    BadSegmentation if it does not fit the image or its counts are malformed."""
    size = rle.get("size")
    if not isinstance(size, (list, tuple)) or [*size] != [height, width]:
        raise BadSegmentation(f"RLE size {size!r:.40} differs from the image's [height, width] "
                              f"[{height}, {width}]")
    raw = rle.get("counts")
    if isinstance(raw, (str, bytes)):
        counts = string_to_counts(raw)
    elif isinstance(raw, list) and all(isinstance(c, int) and not isinstance(c, bool)
                                       for c in raw):
        counts = np.asarray(raw, np.int64)
    else:
        raise BadSegmentation(f"RLE counts are {type(raw).__name__}; COCO writes a list of ints "
                              "or a compressed string")
    if counts.size and counts.min() < 0:
        raise BadSegmentation(f"RLE has a negative run ({int(counts.min())})")
    if int(counts.sum()) != height * width:
        raise BadSegmentation(f"RLE runs add up to {int(counts.sum())} pixels, not "
                              f"{height} x {width} = {height * width}")
    values = np.arange(counts.size) % 2 == 1
    return np.repeat(values, counts).reshape(width, height).T


def _part(raw: object) -> np.ndarray:
    """One polygon part [x1, y1, x2, y2, ...] as float64 [k, 2]."""
    try:
        array = np.asarray(raw) if isinstance(raw, (list, tuple)) else None
    except ValueError:  # ragged: a list inside
        array = None
    if array is None or array.ndim != 1 or array.dtype.kind not in "iuf" or len(array) % 2:
        raise BadSegmentation(f"polygon {raw!r:.60} is not a flat list of x, y numbers")
    points = array.astype(np.float64).reshape(-1, 2)
    if not np.isfinite(points).all():
        raise BadSegmentation("polygon has a coordinate that is not finite")
    return points


def _crossings(points: np.ndarray, height: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, x) where each edge crosses a row's centre line y = row + 0.5 (half-open in y,
    so a vertex on a centre line counts once)."""
    x0, y0 = points[:, 0], points[:, 1]
    x1, y1 = np.append(x0[1:], x0[0]), np.append(y0[1:], y0[0])  # each edge to the next point
    keep = y0 != y1
    x0, y0, x1, y1 = x0[keep], y0[keep], x1[keep], y1[keep]
    low, high = np.minimum(y0, y1), np.maximum(y0, y1)
    first = np.clip(np.ceil(low - 0.5), 0, height).astype(np.int64)
    stop = np.clip(np.ceil(high - 0.5), 0, height).astype(np.int64)
    n = stop - first
    edge = np.repeat(np.arange(n.size), n)
    rows = first[edge] + (np.arange(edge.size) - np.repeat(np.cumsum(n) - n, n))
    slope = (x1 - x0) / (y1 - y0)
    xs = x0[edge] + (rows + 0.5 - y0[edge]) * slope[edge]
    return rows, xs


def _polygon_rows(parts: Sequence[object], height: int, width: int
                  ) -> tuple[int, np.ndarray] | None:
    """(top row, bool [rows, width] block from it) of united polygon parts; None if empty."""
    rows_all, starts_all, stops_all = [], [], []
    for raw in parts:
        points = _part(raw)
        if len(points) < 3:
            continue
        rows, xs = _crossings(points, height)
        order = np.lexsort((xs, rows))
        rows, xs = rows[order], xs[order]
        rows_all.append(rows[0::2])  # crossings pair up along each row (even-odd)
        starts_all.append(xs[0::2])
        stops_all.append(xs[1::2])
    if not rows_all or not sum(r.size for r in rows_all):
        return None
    rows = np.concatenate(rows_all)
    first = np.clip(np.ceil(np.concatenate(starts_all) - 0.5), 0, width).astype(np.int64)
    stop = np.clip(np.ceil(np.concatenate(stops_all) - 0.5), 0, width).astype(np.int64)
    top, bottom = int(rows.min()), int(rows.max()) + 1
    length = stop - first
    keep = length > 0
    start, length = ((rows - top) * width + first)[keep], length[keep]
    # every covered pixel's flat index: each span's start + 0..length-1 (parts united: a
    # pixel two spans cover is set twice)
    pixels = np.repeat(start - np.cumsum(length) + length, length) + np.arange(length.sum())
    block = np.zeros((bottom - top) * width, bool)
    block[pixels] = True
    return top, block.reshape(bottom - top, width)


def polygons_to_mask(parts: Sequence[object], height: int, width: int) -> np.ndarray:
    """COCO polygon parts (flat [x1, y1, ...] lists) -> bool [height, width], parts united."""
    mask = np.zeros((height, width), bool)
    block = _polygon_rows(parts, height, width)
    if block is not None:
        mask[block[0]:block[0] + len(block[1])] = block[1]
    return mask


def segmentation_to_mask(segmentation: object, height: int, width: int) -> np.ndarray:
    """One annotation's segmentation (polygon list or RLE dict) -> bool [height, width]."""
    return _rows_of(segmentation, height, width)[1] if isinstance(segmentation, dict) else (
        polygons_to_mask(_polygons(segmentation), height, width))


def _polygons(segmentation: object) -> list[object]:
    if not isinstance(segmentation, list):
        raise BadSegmentation(f"segmentation is {type(segmentation).__name__}; COCO writes a "
                              "list of polygons or an RLE object {\"counts\", \"size\"}")
    return segmentation


def _rows_of(segmentation: object, height: int, width: int) -> tuple[int, np.ndarray]:
    """(top row, bool block) of one annotation's pixels (an empty block: none)."""
    if isinstance(segmentation, dict):
        return 0, decode_rle(segmentation, height, width)
    block = _polygon_rows(_polygons(segmentation), height, width)
    return block if block is not None else (0, np.zeros((0, width), bool))


def semantic_mask(instances: Sequence[Instance], height: int, width: int) -> np.ndarray:
    """uint8 [height, width]: 0 background, label + 1 per object, IGNORE for crowd regions
    (painting order in the module docstring); BadSegmentation naming the annotation id."""
    out = np.zeros((height, width), np.uint8)
    painted: list[tuple[bool, int, int, int, np.ndarray, Instance]] = []
    for inst in instances:
        if not 0 <= inst.label < MAX_CLASSES:
            raise BadSegmentation(f"annotation {inst.ann_id!r}: class id {inst.label} does not "
                                  f"fit a uint8 mask (0..{MAX_CLASSES - 1}; 255 is ignore)")
        try:
            top, block = _rows_of(inst.segmentation, height, width)
        except BadSegmentation as exc:
            raise BadSegmentation(f"annotation {inst.ann_id!r}: {exc}") from None
        painted.append((not inst.crowd, -int(block.sum()), len(painted), top, block, inst))
    painted.sort(key=lambda item: item[:3])  # crowd first, then largest area first
    for _, _, _, top, block, inst in painted:
        out[top:top + len(block)][block] = IGNORE if inst.crowd else inst.label + 1
    return out
