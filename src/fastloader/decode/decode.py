"""Decode face: header(), decode(), BatchDecoder; native when built, else Pillow, same semantics."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from fastloader.checks import flag, int_at_least
from fastloader.decode import _native, coeffs
from fastloader.decode.batch_args import (
    Conversion,
    as_bytes_like,
    check_batch,
    check_crop,
    check_normalize,
    check_out_size,
    check_places,
    check_planar,
    check_tiles,
    three,
)
from fastloader.decode.orientation import check_orientations
from fastloader.decode.pillow import (
    ImageHeader,
    decode_pillow,
    exif_orientation,
    header_pillow,
    is_jpeg,
)
from fastloader.decode.pillow_batch import decode_slot_pillow
from fastloader.decode.pixels import PixelProgram
from fastloader.decode.views import check_program
from fastloader.decode.views_decoder import ViewsDecoding
from fastloader.decode.views_pillow import DecodeCount, finish_slot
from fastloader.errors import (
    DecodeError,
    FastloaderError,
    invalid_argument,
)

__all__ = ["BatchDecoder", "ImageHeader", "decode", "header"]

_THREADS_FIX = "Use 1 per core you want decoding."

if TYPE_CHECKING:
    import torch

    from fastloader import _core
    from fastloader.decode.tiles import TileBatch

log = logging.getLogger(__name__)  # a child of the "fastloader" logger
_BACKENDS = ("auto", "native", "pillow")
_MAX_PIXELS = 2 * 89478485  # Pillow's decompression-bomb error threshold; the C++ core uses it too


# The native decoder takes libjpeg's 1/8 DCT scale only while the scaled image stays at least
# three times the output (kDctMargin in csrc/jpeg.cpp, the pixel rule across backends), so a
# decode to 1/24 of each side is the cheapest that still entropy-decodes every scan: what pack
# and verify use to prove a JPEG whole.
CHECK_DIVISOR = 24


def check_size(height: int, width: int) -> tuple[int, int]:
    """The output size of a whole-file check decode of a height x width JPEG (see above)."""
    return max(1, height // CHECK_DIVISOR), max(1, width // CHECK_DIVISOR)


def header(data: object) -> ImageHeader:
    """Read what an image says about itself, without decoding its pixels.

    Args:
        data: the encoded image (bytes, bytearray, memoryview or a uint8 numpy array).

    Returns:
        ImageHeader: width, height, components, colour space, subsampling and progressiveness.

    Raises:
        InvalidTypeError: data is not bytes-like.
        DecodeError: the bytes are not a readable image.
    """
    data = as_bytes_like(data)
    if coeffs.is_coeffs(data):
        return coeffs.header(data)
    if _native.native_module() is None or not is_jpeg(data):
        return header_pillow(data)
    from fastloader import _core  # loaded and checked by _native; typed by _core.pyi

    try:
        native = _core.header(data)
    except ValueError as exc:
        raise DecodeError(f"cannot read JPEG header ({len(data)} bytes): {exc}") from exc
    return ImageHeader(native.width, native.height, native.components, native.color_space,
                       native.subsampling, native.progressive)


def decode(
    data: object,
    *,
    crop: Sequence[int] | None = None,
    size: Sequence[int] | None = None,
    flip: bool = False,
    apply_exif_orientation: bool = False,
) -> np.ndarray:
    """Decode image bytes to an RGB uint8 array, optionally cropped, resized and mirrored.

    Resizing is bilinear, antialiased on downscale like Pillow's BILINEAR; the native path
    decodes only the crop's rows and columns and may use libjpeg's DCT scaling.

    Args:
        data: the encoded image (bytes, bytearray, memoryview or a uint8 numpy array).
        crop: (top, left, height, width) in source pixels; None for the whole image.
        size: (height, width) of the output; None keeps the crop's size.
        flip: mirror the result left-right.
        apply_exif_orientation: turn the image as PIL.ImageOps.exif_transpose does (its EXIF
            Orientation tag, read from these bytes) before the crop, which is then a box of
            the turned image; False (the default) ignores the tag, as torchvision does.

    Returns:
        numpy.ndarray: a (height, width, 3) uint8 array.

    Raises:
        InvalidArgumentError: the crop is outside the image or a size is not positive.
        InvalidTypeError: data is not bytes-like, or crop/size are not int sequences.
        DecodeError: the bytes cannot be decoded (or exceed the decompression-bomb limit).
    """
    data = as_bytes_like(data)
    hdr = header(data)
    turn = flag("apply_exif_orientation", apply_exif_orientation)
    if coeffs.is_coeffs(data):
        if turn and coeffs.orientation(data) not in (0, 1):
            raise DecodeError("apply_exif_orientation=True: a coeffs record is decoded as stored; "
                              "decode its JPEG (packdata recode --codec jpeg) to turn it")
        box = check_crop(crop, hdr) if crop is not None else None
        out_size = check_out_size(size) if size is not None else None
        return coeffs.decode_record(data, box, out_size, bool(flip))
    orientation = exif_orientation(data) if turn else 1
    if orientation >= 5:  # a transposing orientation: crops are boxes of the turned image
        hdr = replace(hdr, height=hdr.width, width=hdr.height)
    box = check_crop(crop, hdr) if crop is not None else None
    out_size = check_out_size(size) if size is not None else None
    if _native.native_module() is None or not is_jpeg(data):
        return decode_pillow(data, box, out_size, bool(flip), orientation)
    if hdr.width * hdr.height > _MAX_PIXELS:  # before allocating: a hostile header can say anything
        raise DecodeError(
            f"image of {hdr.height}x{hdr.width} (HxW) pixels exceeds the decompression-bomb limit "
            f"of {_MAX_PIXELS} pixels (Pillow's 2 * MAX_IMAGE_PIXELS)"
        )
    full = box or (0, 0, hdr.height, hdr.width)
    out = np.empty((*(out_size or full[2:]), 3), np.uint8)
    from fastloader import _core  # loaded and checked by _native; typed by _core.pyi

    error = _core.decode_into(data, full, bool(flip), out, orientation=orientation)
    if error is not None:
        raise DecodeError(f"cannot decode JPEG ({len(data)} bytes): {error}")
    return out


T = TypeVar("T")


class BatchDecoder(ViewsDecoding):
    """Decodes batches of records into one NHWC uint8 buffer over a persistent thread pool;
    decode_views_into writes several views of each record from one decode.

    Output is bitwise identical for any num_threads. Use it as a context manager, or call
    close() to stop the threads.

    Args:
        num_threads: decode threads (>= 1); settable later through the num_threads property.
        backend: "auto" uses the compiled core when it is available, "native" demands it,
            "pillow" forces the reference path.

    Raises:
        InvalidArgumentError: num_threads < 1 or an unknown backend.
        NativeUnavailableError: backend="native" but the extension is missing or stale.
    """

    def __init__(self, num_threads: int = 1, backend: str = "auto") -> None:
        if backend not in _BACKENDS:
            raise invalid_argument(
                "backend",
                backend,
                f"it must be one of {_BACKENDS}",
                "Use 'auto' unless you need to force one path.",
            )
        self._num_threads = int_at_least("num_threads", num_threads, 1, _THREADS_FIX)
        native = False
        if backend == "native":
            native = _native.require_native() is not None
        elif backend == "auto":
            native = _native.native_module() is not None
        self._core: _core.BatchDecoder | None = None
        if native:
            from fastloader import _core  # loaded and checked by _native; typed by _core.pyi

            self._core = _core.BatchDecoder(self._num_threads)
        elif backend == "auto":
            log.info("BatchDecoder: the native extension is not in use (%s); decoding with "
                     "Pillow", _native.unavailable_reason())
        self._executor: ThreadPoolExecutor | None = None
        self._executor_pid = os.getpid()
        self._closed = False
        self._decoded = DecodeCount()  # the Pillow path's record decodes (records_decoded)

    @property
    def backend(self) -> str:
        """The path actually used: "native" or "pillow"."""
        return "native" if self._core is not None else "pillow"

    @property
    def num_threads(self) -> int:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        self._num_threads = int_at_least("num_threads", value, 1, _THREADS_FIX)
        if self._core is not None:
            self._core.num_threads = self._num_threads
        self._stop_executor()

    def _stop_executor(self) -> None:
        """Shut the Pillow path's threads down; in a forked child, only forget the parent's
        executor (its threads are not here, and a lock of it that a parent thread held at
        fork time would never be released: shutting it down could block forever)."""
        executor, self._executor = self._executor, None
        if executor is not None and self._executor_pid == os.getpid():
            executor.shutdown(wait=True)

    def close(self) -> None:
        """Stop the worker threads; the decoder cannot be used afterwards."""
        if self._core is not None:
            self._core.close()
        self._stop_executor()
        self._closed = True

    def __enter__(self) -> BatchDecoder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def decode_into(
        self,
        records: Sequence[object],
        crops: npt.ArrayLike,
        flips: npt.ArrayLike,
        out: np.ndarray | torch.Tensor,
        tiles: TileBatch | tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        *,
        planar: np.ndarray | torch.Tensor | None = None,
        scale: npt.ArrayLike | None = None,
        shift: npt.ArrayLike | None = None,
        places: npt.ArrayLike | None = None,
        fill: int = 0,
        orientations: npt.ArrayLike | None = None,
        program: PixelProgram | None = None,
    ) -> list[str | None]:
        """Decode records[k] cropped to crops[k], resized to out's H x W, mirrored if flips[k].

        A sample that fails is zero-filled and reported; the others are still decoded.

        Args:
            records: N encoded images (bytes-like each).
            crops: (N, 4) ints, rows [top, left, height, width]; [0, 0, 0, 0] is the whole image.
            flips: N booleans.
            out: a C-contiguous (N, H, W, 3) uint8 numpy array or CPU tensor, written in place.
            tiles: the batch's restart-tile tables (a fastloader.decode.tiles.TileBatch or its
                (headers, offsets, spans) tuple; None: untiled). The native path then decodes a crop
                from only the segments it needs; the Pillow path ignores them (same pixels).
            planar: an (N, 3, H, W) float32 or uint8 array (or CPU tensor) that also receives each
                sample channel-first, converted by the decoding thread while the sample is in cache.
            scale: 3 floats, float32 planar only: planar = out * scale[c] + shift[c] (default 1).
            shift: 3 floats, float32 planar only (default 0).
            places: (N, 4) ints, rows [top, left, height, width]: sample k's resized crop goes
                into that rectangle of its slot (a letterbox, augment.plan_geometry's places)
                and every other pixel of the slot is `fill`; None: crops fill their slots.
            fill: the padding value with places, an int in [0, 255].
            orientations: N EXIF orientations (ints in 1..8; None: all 1): record k is turned as
                PIL.ImageOps.exif_transpose turns it, crops[k] a box of the turned image.
            program: a PixelProgram (fastloader.decode.pixels) of N rows: sample k's pixel ops
                run on its whole slot by the decoding thread, before the planar copy.

        Returns:
            list: one entry per sample, None on success or the error message.

        Raises:
            FastloaderError: the decoder was closed.
            InvalidArgumentError: shapes, dtypes or lengths disagree, or planar overlaps out.
            InvalidTypeError: records is not a sequence, or tiles is not a TileBatch.
        """
        if self._closed:
            raise FastloaderError("this BatchDecoder was closed; create a new one")
        crops_arr, flips_arr, array = check_batch(records, crops, flips, out)
        tile_arrays = check_tiles(tiles, len(records))
        conversion = check_planar(planar, array, scale, shift)
        rows, fill = check_places(places, fill, array)
        turns = None if orientations is None else check_orientations(orientations, len(records))
        ops = None if program is None else check_program("program", program, len(records))
        if self._core is None:
            return self._decode_pillow(records, crops_arr, flips_arr, array, conversion, rows,
                                       fill, turns, ops)
        dst, scale_arr, shift_arr = conversion or (None, None, None)
        tile_headers, tile_offsets, tile_spans = tile_arrays
        errors, fallback = self._core.decode_into(
            records, crops_arr, flips_arr, array, tile_headers=tile_headers,
            tile_offsets=tile_offsets, tile_spans=tile_spans, planar=dst,
            scale=None if scale_arr is None else three(scale_arr),
            shift=None if shift_arr is None else three(shift_arr), places=rows, fill=fill,
            orientations=turns, program_codes=None if ops is None else ops.codes,
            program_params=None if ops is None else ops.params,
        )
        for k in fallback:  # non-JPEG records: Pillow, with the GIL held
            self._decoded.add()
            errors[k] = decode_slot_pillow(records[k], crops_arr[k], flips_arr[k], array[k],
                                           None if rows is None else rows[k], fill,
                                           1 if turns is None else int(turns[k]))
            finish_slot(array[k], errors[k] is None, ops, k, None if dst is None else dst[k],
                        scale_arr, shift_arr)
        return list(errors)

    def normalize_planar(self, src: np.ndarray | torch.Tensor, out: np.ndarray | torch.Tensor, *,
                         scale: npt.ArrayLike | None = None,
                         shift: npt.ArrayLike | None = None) -> None:
        """out = src * scale[c] + shift[c]: a channel-first uint8 batch to float32 on the
        decoder's threads (GIL released), with the arithmetic of decode_into's planar output.

        A batch_transform's result goes through it, so a transform that changes nothing gives
        the bits of the fused path.

        Args:
            src: a C-contiguous (N, 3, H, W) uint8 array or CPU tensor.
            out: a writable C-contiguous (N, 3, H, W) float32 array or CPU tensor, not
                overlapping src.
            scale: 3 floats (default 1).
            shift: 3 floats (default 0).

        Raises:
            FastloaderError: the decoder was closed.
            InvalidArgumentError: shapes, dtypes or layouts are wrong, or out overlaps src.
        """
        if self._closed:
            raise FastloaderError("this BatchDecoder was closed; create a new one")
        src_arr, out_arr, scale_arr, shift_arr = check_normalize(src, out, scale, shift)
        if self._core is not None:
            self._core.normalize_planar(
                src_arr, out_arr, scale=None if scale_arr is None else three(scale_arr),
                shift=None if shift_arr is None else three(shift_arr))
            return
        if scale_arr is None:  # numpy ufuncs release the GIL; float32 multiply, then add
            out_arr[...] = src_arr
        else:
            np.multiply(src_arr, scale_arr[None, :, None, None], out=out_arr)
        if shift_arr is not None:
            out_arr += shift_arr[None, :, None, None]

    def _decode_pillow(
        self, records: Sequence[object], crops: np.ndarray, flips: np.ndarray, out: np.ndarray,
        conversion: Conversion | None, places: np.ndarray | None = None, fill: int = 0,
        turns: np.ndarray | None = None, program: PixelProgram | None = None,
    ) -> list[str | None]:
        planar, scale, shift = conversion or (None, None, None)

        def one(k: int) -> str | None:
            self._decoded.add()
            error = decode_slot_pillow(records[k], crops[k], flips[k], out[k],
                                       None if places is None else places[k], fill,
                                       1 if turns is None else int(turns[k]))
            finish_slot(out[k], error is None, program, k, None if planar is None else planar[k],
                        scale, shift)
            return error

        return self._map_samples(one, len(records))

    def _map_samples(self, one: Callable[[int], T], n: int) -> list[T]:
        """[one(k) for k in range(n)] on the Pillow path's threads, in order."""
        if self._num_threads == 1 or n < 2:
            return [one(k) for k in range(n)]
        if self._executor_pid != os.getpid():  # forked: the parent's threads are not here
            self._executor, self._executor_pid = None, os.getpid()
        if self._executor is None:  # Pillow releases the GIL while decoding, so threads pay
            self._executor = ThreadPoolExecutor(self._num_threads, "fastloader-decode")
        return list(self._executor.map(one, range(n)))
