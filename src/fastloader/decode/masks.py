"""A mask through a sample's crop plan: the geometry the fused decode applied to its pixels.

The same mapping as decode/boxes.py: source pixel edges map linearly to output pixel edges, the
crop (top, left, height, width) onto the output (out_h, out_w), mirrored left-right when
flipped. A label image is resampled with nearest neighbour (labels are never blended): output
pixel (i, j) takes the source pixel under its centre, row top + floor((i + 0.5) * height /
out_h), column left + floor((j + 0.5) * width / out_w), the columns reversed when flipped. The
two index maps are gathered with np.take (numpy releases the GIL in it), rows first, so a
batch's masks cost two passes of output size each. A stored mask (row-major runs) goes through
the extension's mask_from_runs when it is built: the same index maps, walked over the runs in
C++ with the GIL released, never expanding the whole mask (several times less CPU).
"""

from __future__ import annotations

import numpy as np

from fastloader.decode import _native
from fastloader.decode.orientation import turn_array


def index_map(start: int, length: int, out: int, limit: int) -> np.ndarray:
    """Source indices (intp [out]) sampled by out output pixels over [start, start + length),
    clipped to [0, limit)."""
    centres = start + (np.arange(out, dtype=np.float64) + 0.5) * (length / out)
    return np.clip(np.floor(centres).astype(np.intp), max(start, 0),
                   min(start + length, limit) - 1)


def map_mask(mask: np.ndarray, crop: np.ndarray, flip: bool, out_size: tuple[int, int],
             out: np.ndarray | None = None) -> np.ndarray:
    """One sample's mask (uint8 [H, W], source pixels) in output pixels.

    Args:
        mask: the sample's label image, its image's size.
        crop: its int (top, left, height, width) source crop from augment.plan.
        flip: whether its output is mirrored left-right.
        out_size: the output (height, width).
        out: a uint8 [out_h, out_w] array to write into (None: a new one).

    Returns:
        uint8 [out_h, out_w]: the crop resized with nearest neighbour (and mirrored).
    """
    top, left, height, width = (int(v) for v in crop)
    out_h, out_w = int(out_size[0]), int(out_size[1])
    rows = index_map(top, height, out_h, mask.shape[0])
    cols = index_map(left, width, out_w, mask.shape[1])
    if flip:
        cols = cols[::-1]
    picked = mask.take(rows, axis=0)
    if out is None:
        return picked.take(cols, axis=1)
    np.take(picked, cols, axis=1, out=out)
    return out


def expand_runs(values: np.ndarray, lengths: np.ndarray, height: int, width: int
                ) -> np.ndarray:
    """Row-major runs (values uint8, lengths uint32) as a uint8 [height, width] array.

    Raises:
        ValueError: the runs do not cover height x width pixels exactly.
    """
    covered = int(lengths.sum(dtype=np.int64))
    if covered != height * width:
        raise ValueError(f"its runs cover {covered} pixels, not its {height} x {width}")
    return np.repeat(values, lengths).reshape(height, width)


def map_runs(values: np.ndarray, lengths: np.ndarray, shape: tuple[int, int], crop: np.ndarray,
             flip: bool, out: np.ndarray, orientation: int = 1) -> np.ndarray:
    """map_mask of a mask given as row-major runs (values uint8, lengths uint32) of shape
    (stored pixels); with an EXIF orientation, crop is a box of the turned mask.

    Raises:
        ValueError: the runs do not cover shape's pixels exactly (the message says how).
    """
    height, width = shape
    core = _native.native_module()
    if core is None or orientation != 1:  # the kernel walks stored rows: turn the mask first
        mask = turn_array(expand_runs(values, lengths, height, width), orientation)
        return map_mask(mask, crop, flip, out.shape, out)
    message = core.mask_from_runs(values, lengths, height, width,
                                  np.ascontiguousarray(crop, np.int64), flip, out)
    if message:
        raise ValueError(message)
    return out
