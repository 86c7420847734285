"""Argument checks of decode() (data, crop, size) and BatchDecoder.decode_into (records, boxes,
flips, out, planar, tiles)."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import SupportsIndex, cast

import numpy as np
import numpy.typing as npt

from fastloader.decode.pillow import ImageHeader
from fastloader.decode.record import Record
from fastloader.decode.tiles import HEADER_FIELDS
from fastloader.errors import invalid_argument, invalid_type


def as_bytes_like(data: object, name: str = "data") -> Record:
    """`data` as a buffer the decoders read: bytes-like as it is, a uint8 array as its bytes."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return data
    if isinstance(data, np.ndarray) and data.dtype == np.uint8:
        return np.ascontiguousarray(data).data.cast("B")
    raise invalid_type(name, data, "bytes, bytearray, memoryview or a uint8 numpy array")


def check_records(records: object) -> int:
    """The number of records: a sequence of bytes-like ones (not one bytes object)."""
    if not isinstance(records, Sequence) or isinstance(records, (bytes, bytearray, memoryview)):
        raise invalid_type("records", records, "a sequence of bytes-like records")
    return len(records)


def as_array(name: str, value: object,
             expected: str = "a uint8 numpy array or CPU torch tensor (N, H, W, 3)") -> np.ndarray:
    """A numpy array or CPU tensor as the numpy array sharing its memory."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "data_ptr") and hasattr(value, "numpy"):  # a CPU torch tensor
        array: np.ndarray = value.numpy()
        return array
    raise invalid_type(name, value, expected)


def check_batch(records: object, crops: npt.ArrayLike, flips: npt.ArrayLike, out: object
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = check_records(records)
    array = as_array("out", out)
    if (
        array.dtype != np.uint8
        or array.ndim != 4
        or array.shape[0] != n
        or array.shape[3] != 3
        or not array.flags.c_contiguous
        or not array.flags.writeable
    ):
        raise invalid_argument(
            "out",
            f"{array.dtype} array of shape {array.shape}",
            f"it must be a writable C-contiguous uint8 array of shape ({n}, H, W, 3)",
            "Allocate it with np.empty((N, H, W, 3), np.uint8) (or a contiguous uint8 tensor).",
        )
    crops_arr = np.ascontiguousarray(crops, dtype=np.int32)
    if crops_arr.shape != (n, 4):
        raise invalid_argument(
            "crops",
            f"array of shape {crops_arr.shape}",
            f"it must have shape ({n}, 4): top, left, height, width",
            "Give one box per record ([0, 0, 0, 0] means the whole image).",
        )
    flips_arr = np.ascontiguousarray(flips, dtype=np.bool_)
    if flips_arr.shape != (n,):
        raise invalid_argument(
            "flips",
            f"array of shape {flips_arr.shape}",
            f"it must have shape ({n},)",
            "Give one flag per record.",
        )
    return crops_arr, flips_arr, array



def check_places(places: npt.ArrayLike | None, fill: object, out: np.ndarray
                 ) -> tuple[np.ndarray | None, int]:
    """(places int32 (N, 4) each inside out's (H, W) with a positive size, or None; fill)."""
    if isinstance(fill, bool) or not isinstance(fill, (int, np.integer)) or not 0 <= fill <= 255:
        raise invalid_argument("fill", fill, "must be an int in [0, 255]", "Pass e.g. 0.")
    if places is None:
        return None, int(fill)
    n, height, width, _ = out.shape
    rows = np.ascontiguousarray(places, dtype=np.int32)
    if rows.shape != (n, 4):
        raise invalid_argument("places", f"array of shape {rows.shape}",
                               f"it must have shape ({n}, 4): top, left, height, width",
                               "Give one rectangle of the output per record.")
    bad = ((rows[:, 0] < 0) | (rows[:, 1] < 0) | (rows[:, 2] < 1) | (rows[:, 3] < 1)
           | (rows[:, 0] + rows[:, 2] > height) | (rows[:, 1] + rows[:, 3] > width))
    if bad.any():
        k = int(bad.argmax())
        raise invalid_argument("places", rows[k].tolist(), f"row {k} must be a rectangle of "
                               f"positive size inside the {height}x{width} (HxW) output",
                               "Take the places of augment.plan_geometry().")
    return rows, int(fill)


Conversion = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]


def three(values: np.ndarray) -> tuple[float, float, float]:
    """A 3-vector as the (c0, c1, c2) float tuple the native call takes."""
    c0, c1, c2 = (float(v) for v in values.tolist())
    return c0, c1, c2


def affine(name: str, value: object) -> np.ndarray | None:
    """3 per-channel constants as float32 (None stays None)."""
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise invalid_type(name, value, "3 numbers (one per RGB channel)") from None
    if arr.shape != (3,) or not np.isfinite(arr).all():
        raise invalid_argument(name, value, "it needs 3 finite numbers, one per RGB channel",
                               "Pass e.g. scale=1/std and shift=-mean/std in 0-255 pixel units.")
    return arr


def check_planar(planar: object, out: np.ndarray, scale: object, shift: object,
                 name: str = "planar") -> Conversion | None:
    """(planar array, scale, shift) checked against out (N, H, W, 3); None without planar.
    name: the argument as the caller's interface calls it (a view's "planars[v]")."""
    if planar is None:
        if scale is not None or shift is not None:
            raise invalid_argument("scale", scale, "scale and shift need a planar output",
                                   "Pass planar=, or drop scale/shift.")
        return None
    array = planar.numpy() if hasattr(planar, "data_ptr") and hasattr(planar, "numpy") else planar
    n, height, width, _ = out.shape
    if (
        not isinstance(array, np.ndarray)
        or array.dtype not in (np.float32, np.uint8)
        or array.shape != (n, 3, height, width)
        or not array.flags.c_contiguous
        or not array.flags.writeable
    ):
        raise invalid_argument(
            name, f"{getattr(array, 'dtype', type(array).__name__)} of shape "
            f"{getattr(array, 'shape', None)}",
            f"it must be a writable C-contiguous float32 or uint8 array of shape "
            f"({n}, 3, {height}, {width})",
            "Allocate it with torch.empty((N, 3, H, W)) (float32) or np.empty(..., np.uint8).")
    if np.may_share_memory(array, out):
        raise invalid_argument(name, "a view of out", f"{name} and its out must not overlap",
                               f"Allocate {name} separately.")
    scale_arr, shift_arr = affine("scale", scale), affine("shift", shift)
    if array.dtype == np.uint8 and (scale_arr is not None or shift_arr is not None):
        raise invalid_argument("scale", scale, "scale and shift apply to float32 planar only",
                               "Pass a float32 planar, or drop scale/shift.")
    return array, scale_arr, shift_arr


def check_normalize(src: object, out: object, scale: object,
                    shift: object) -> tuple[np.ndarray, np.ndarray, np.ndarray | None,
                                         np.ndarray | None]:
    """normalize_planar's arguments: (src uint8, out float32 (N, 3, H, W), scale, shift)."""
    arrays = [a.numpy() if hasattr(a, "data_ptr") and hasattr(a, "numpy") else a
              for a in (src, out)]
    for name, array, dtype in (("src", arrays[0], np.uint8), ("out", arrays[1], np.float32)):
        if (not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != 4
                or array.shape[1] != 3 or not array.flags.c_contiguous
                or array.shape != getattr(arrays[0], "shape", None)):
            raise invalid_argument(
                name, f"{getattr(array, 'dtype', type(array).__name__)} of shape "
                f"{getattr(array, 'shape', None)}", f"it must be a C-contiguous {dtype.__name__} "
                "array of shape (N, 3, H, W), src's and out's the same",
                "Pass .contiguous() tensors (or arrays) of one shape.")
    checked = cast("list[np.ndarray]", arrays)  # each an ndarray: the loop refused others
    if not checked[1].flags.writeable or np.may_share_memory(checked[0], checked[1]):
        raise invalid_argument("out", "read-only or a view of src", "out must be writable and "
                               "must not overlap src", "Allocate out separately.")
    return checked[0], checked[1], affine("scale", scale), affine("shift", shift)


def check_tiles(tiles: object, n: int) -> tuple[np.ndarray | None, ...]:
    """(headers (n, fields) int64, offsets uint32, spans (n, 2) uint64) or three Nones."""
    fields = len(HEADER_FIELDS)
    if tiles is None:
        return (None, None, None)
    if not isinstance(tiles, tuple) or len(tiles) != 3:
        raise invalid_type("tiles", tiles, "a TileBatch (headers, offsets, spans) or None")
    headers = np.ascontiguousarray(tiles[0], np.int64)
    offsets = np.ascontiguousarray(tiles[1], np.uint32)
    spans = np.ascontiguousarray(tiles[2], np.uint64)
    if headers.shape != (n, fields) or offsets.ndim != 1 or spans.shape != (n, 2):
        raise invalid_argument(
            "tiles",
            f"headers {headers.shape}, offsets {offsets.shape}, spans {spans.shape}",
            f"headers must be ({n}, {fields}), offsets 1-D and spans ({n}, 2)",
            "Build it with PackedDataset.tile_batch(indices) or TileBatch.from_tables().",
        )
    return headers, offsets, spans


def _int_tuple(name: str, value: Iterable[SupportsIndex], length: int, what: str
               ) -> tuple[int, ...]:
    try:
        items = tuple(operator.index(v) for v in value)
    except TypeError:
        raise invalid_type(name, value, f"a sequence of {length} ints {what}") from None
    if len(items) != length:
        raise invalid_argument(
            name,
            value,
            f"it must have {length} items {what}",
            f"Pass e.g. {'(0, 0, 224, 224)' if length == 4 else '(224, 224)'}.",
        )
    return items


def check_crop(crop: Iterable[SupportsIndex], hdr: ImageHeader) -> tuple[int, int, int, int]:
    """decode()'s crop as (top, left, height, width) inside the image hdr describes."""
    top, left, height, width = _int_tuple("crop", crop, 4, "(top, left, height, width)")
    if top < 0 or left < 0 or height < 1 or width < 1:
        raise invalid_argument(
            "crop",
            crop,
            "top/left must be >= 0 and height/width >= 1",
            "Give the box in source pixels.",
        )
    if top + height > hdr.height or left + width > hdr.width:
        raise invalid_argument(
            "crop",
            crop,
            f"the box must lie inside the {hdr.height}x{hdr.width} (HxW) image",
            "Clamp the box to the image (see fastloader.decode.decode.header()).",
        )
    return top, left, height, width


def check_out_size(size: Iterable[SupportsIndex]) -> tuple[int, int]:
    """decode()'s size as a positive (height, width)."""
    height, width = _int_tuple("size", size, 2, "(height, width)")
    if height < 1 or width < 1:
        raise invalid_argument(
            "size",
            size,
            "height and width must be >= 1",
            "Pass the output size in pixels, e.g. (224, 224).",
        )
    return height, width
