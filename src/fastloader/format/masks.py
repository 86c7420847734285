"""The stored form of a `mask` field: a uint8 label image [H, W] as one compressed blob.

A mask is a single-channel label image (0 = background, k = class or instance k), the same
height and width as its sample's first image field. It is stored in a variable bytes column as
`MAGIC + uint32 height + uint32 width + zlib(run values + uint32 run lengths)`: the row-major
runs of equal labels, deflated. Label images are a few flat regions, so the runs are few and
np.repeat rebuilds the array in one pass; measured on 512x512 masks of a few shapes it decodes
several times faster than the same mask as an 8-bit PNG through Pillow, and is smaller
(BENCHMARKS.md, "Segmentation"). PNG stays the exchange form: pack takes PNG bytes or paths.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Callable

import numpy as np

from fastloader.decode.masks import expand_runs

MAGIC = b"FLM1"  # fastloader mask, version 1 (runs + zlib)
_HEADER = struct.Struct("<4sII")
MAX_SIDE = 1 << 16  # a side above this is not a label image of a photo (and breaks uint32 runs)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class MaskError(ValueError):
    """A value that is not a usable mask; the message says why."""


def encode_mask(mask: np.ndarray) -> bytes:
    """The stored blob of a uint8 [H, W] mask."""
    height, width = mask.shape
    flat = np.ascontiguousarray(mask, np.uint8).reshape(-1)
    if flat.size == 0:
        body = b""
    else:
        starts = np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1])
        lengths = np.diff(np.append(starts, flat.size)).astype("<u4")
        body = flat[starts].tobytes() + lengths.tobytes()
    return _HEADER.pack(MAGIC, height, width) + zlib.compress(body, 6)


def decode_mask(blob: bytes | memoryview) -> np.ndarray:
    """encode_mask's inverse: a fresh writable uint8 [H, W]; MaskError if the blob is damaged."""
    values, lengths, height, width = mask_runs(blob)
    try:
        return expand_runs(values, lengths, height, width)
    except ValueError as exc:
        raise MaskError(f"a stored mask: {exc}") from None


def mask_runs(blob: bytes | memoryview) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A stored blob's runs: (values uint8 [n], lengths uint32 [n], height, width), inflated
    but not expanded (their sum is checked by whoever expands them); MaskError if damaged."""
    if len(blob) < _HEADER.size:
        raise MaskError(f"a stored mask of {len(blob)} bytes is shorter than its header")
    magic, height, width = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise MaskError(f"a stored mask starts with {bytes(magic)!r}, not {MAGIC!r}")
    try:
        body = zlib.decompress(memoryview(blob)[_HEADER.size:])
    except zlib.error as exc:
        raise MaskError(f"a stored mask's runs do not inflate ({exc})") from None
    runs = len(body) // 5
    if len(body) != runs * 5:
        raise MaskError(f"a stored mask's runs are {len(body)} bytes, not a multiple of 5")
    values = np.frombuffer(body, np.uint8, runs)
    lengths = np.frombuffer(body, "<u4", runs, offset=runs)
    if not lengths.flags.aligned:  # they follow the values: copied to an aligned array
        lengths = lengths.copy()
    return values, lengths.astype(np.uint32, copy=False), int(height), int(width)


def _from_png(data: bytes, where: str) -> np.ndarray:
    """A PNG's pixels as a uint8 label image: modes L (grey), P (palette: the indices) and 1."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            mode = image.mode
            if mode not in ("L", "P", "1"):
                raise MaskError(
                    f"{where} is a {mode} image ({_mode_words(mode)}); a mask is one 8-bit "
                    "channel of labels: save it as 8-bit grayscale ('L') or palette ('P')")
            image.load()
            array = np.asarray(image)
    except MaskError:
        raise
    except UnidentifiedImageError:
        raise MaskError(f"{where} is not an image Pillow recognises") from None
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError for bad data
        raise MaskError(f"{where} does not decode ({type(exc).__name__}: {exc})") from None
    return array.astype(np.uint8)


def _mode_words(mode: str) -> str:
    if mode in ("RGB", "RGBA", "CMYK", "YCbCr", "LA", "PA", "RGBX"):
        return f"{len(mode)} channels"
    if mode.startswith("I") or mode == "F":
        return "16- or 32-bit values"
    return "not 8-bit single-channel"


def to_mask(value: object, read: Callable[[str], bytes] | None = None) -> np.ndarray:
    """A pack value (uint8 [H, W] array, PNG bytes, or a PNG path) as a uint8 [H, W] array.

    Args:
        value: the sample's mask value.
        read: path -> bytes (the packer's size-capped reader); None reads the file whole.

    Raises:
        MaskError: not single-channel, not uint8, empty, or not decodable (says which).
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        array = _from_png(bytes(value), "the mask's bytes")
    elif isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        try:
            data = read(path) if read is not None else open(path, "rb").read()  # noqa: SIM115
        except OSError as exc:
            raise MaskError(f"cannot read mask file {path!r}: {exc.strerror or exc}") from None
        array = _from_png(data, f"mask file {path!r}")
    elif isinstance(value, np.ndarray):
        array = _checked_array(value)
    else:
        raise MaskError(f"expected a uint8 [H, W] numpy array, PNG bytes or a PNG path, got "
                        f"{type(value).__name__}")
    if array.ndim != 2 or 0 in array.shape or max(array.shape) > MAX_SIDE:
        raise MaskError(f"a mask of shape {array.shape} is not a non-empty [H, W] image")
    return np.ascontiguousarray(array)


def _checked_array(value: np.ndarray) -> np.ndarray:
    if value.dtype != np.uint8:
        raise MaskError(f"a mask array must be uint8 (labels 0..255), got {value.dtype}; "
                        "convert it with .astype(np.uint8) if its labels fit")
    if value.ndim == 3 and value.shape[2] == 1:
        value = value[:, :, 0]
    if value.ndim != 2:
        raise MaskError(f"a mask array must be single-channel [H, W], got shape {value.shape}")
    return value
