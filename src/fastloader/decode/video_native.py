"""The native window decoder (fastloader._video, csrc/video/: libav* with the GIL released for
the whole window) behind decode/video.py, and when it is used: where the module was built (it
needs FFmpeg's development files at build time), is current, and the extension is not disabled
(FASTLOADER_DISABLE_NATIVE=1); otherwise, and for a stream it leaves (status LEFT), PyAV decodes.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np

from fastloader import __version__
from fastloader.decode._native import native_module
from fastloader.decode.record import Record
from fastloader.errors import DecodeError

DECODED, DAMAGED, LEFT = 0, 1, 2  # decode_window's status
THREAD_TYPE_CODES = {"SLICE": 2, "FRAME": 1, "AUTO": 3}  # FFmpeg's FF_THREAD_* bits

_module: ModuleType | bool | None = False  # False: not looked for yet


def _import() -> ModuleType | None:
    try:
        module = importlib.import_module("fastloader._video")
    except ImportError:  # not built here (no FFmpeg headers), or its FFmpeg is missing
        return None
    return module if getattr(module, "__version__", None) == __version__ else None


def module() -> ModuleType | None:
    """fastloader._video when it is built, current and the extension is not disabled."""
    global _module
    if native_module() is None:
        return None
    if _module is False:
        _module = _import()
    return _module if isinstance(_module, ModuleType) else None


def decode_window(data: Record, seek_pts: int, pts: np.ndarray,
                  crop: tuple[int, int, int, int], size: tuple[int, int], flip: bool,
                  threads: int, thread_type: str, what: str
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """The frames of ascending distinct `pts`, each cut to crop as RGB24, scaled to size
    (Pillow's bilinear, antialiased, within one level) and flipped if asked: uint8
    [U, height, width, 3], and which of them were found; None where this path leaves the
    stream to PyAV (or is not built); DecodeError naming `what` where the bytes are damaged."""
    native = module()
    if native is None:
        return None
    out = np.empty((len(pts), size[0], size[1], 3), np.uint8)
    found = np.zeros(len(pts), np.uint8)
    status, why = native.decode_window(data, seek_pts, np.ascontiguousarray(pts, np.int64),
                                       crop, flip, threads, THREAD_TYPE_CODES[thread_type], out,
                                       found)
    if status == DAMAGED:
        raise DecodeError(f"{what}: {why} near pts {seek_pts}..{int(pts[-1])}; the file is "
                          "damaged: re-encode or drop it")
    return (out, found.astype(bool)) if status == DECODED else None
