"""Views: several crops of each sample from one decode (BatchDecoder.decode_views_into), and
the checks of its arguments.

A view is one crop box, flip, output size, pixel program and channel-first target a sample;
every view of a sample comes from one read and one entropy decode of its record (the union of
its views' boxes, at the DCT scale the most demanding view allows), each then resized from
that decode as decode_into resizes a crop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fastloader.decode.batch_args import affine, as_array, check_planar, check_records
from fastloader.decode.orientation import check_orientations
from fastloader.decode.pixels import PixelProgram
from fastloader.errors import invalid_argument, invalid_type

__all__ = ["ViewBatch", "check_program", "check_views"]

_OUTS_FIX = ("Pass one C-contiguous uint8 array (or CPU tensor) of shape (N, H_v, W_v, 3) a view, "
             "e.g. [np.empty((N, 224, 224, 3), np.uint8), np.empty((N, 96, 96, 3), np.uint8)].")


@dataclass(frozen=True)
class ViewBatch:
    """decode_views_into's arguments, checked: N samples, V views."""

    crops: np.ndarray  # int32 (N, V, 4): top, left, height, width; all 0: the whole image
    flips: np.ndarray  # bool (N, V)
    outs: tuple[np.ndarray, ...]  # V uint8 (N, H_v, W_v, 3)
    planars: tuple[np.ndarray | None, ...]  # V channel-first targets (or None); uint8: a copy
    programs: tuple[PixelProgram | None, ...]  # V PixelPrograms (or None)
    scale: np.ndarray | None  # float32 (3,): planar = out * scale + shift (float32 planars)
    shift: np.ndarray | None
    turns: np.ndarray | None  # uint8 (N,) EXIF orientations, None: all 1

    @property
    def views(self) -> int:
        return len(self.outs)


def _check_outs(outs: object, n: int) -> tuple[np.ndarray, ...]:
    if not isinstance(outs, Sequence) or isinstance(outs, (str, bytes, np.ndarray)):
        raise invalid_type("outs", outs, "a sequence (list or tuple) of V arrays, one a view")
    if len(outs) == 0:
        raise invalid_argument("outs", outs, "there must be at least one view", _OUTS_FIX)
    arrays = tuple(as_array(f"outs[{v}]", out) for v, out in enumerate(outs))
    for v, array in enumerate(arrays):
        if (array.dtype != np.uint8 or array.ndim != 4 or array.shape[0] != n
                or array.shape[3] != 3 or min(array.shape[1:3]) < 1
                or not array.flags.c_contiguous or not array.flags.writeable):
            raise invalid_argument(
                f"outs[{v}]", f"{array.dtype} array of shape {array.shape}",
                f"it must be a writable C-contiguous uint8 array of shape ({n}, H, W, 3), H and "
                "W >= 1", _OUTS_FIX)
    _check_apart([(f"outs[{v}]", a) for v, a in enumerate(arrays)])
    return arrays


def _check_apart(named: Sequence[tuple[str, np.ndarray | None]]) -> None:
    """No two of the views' outputs may share memory: one view would overwrite another."""
    present = [(name, a) for name, a in named if a is not None]
    for i, (first, a) in enumerate(present):
        for second, b in present[i + 1:]:
            if np.may_share_memory(a, b):
                raise invalid_argument(second, f"memory shared with {first}",
                                       "every view's outputs must be memory of their own",
                                       "Allocate one array a view and output.")


def _check_boxes(crops: npt.ArrayLike, flips: npt.ArrayLike, n: int, views: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    try:
        crops_arr = np.ascontiguousarray(crops, dtype=np.int32)
    except (TypeError, ValueError):
        raise invalid_type("crops", crops, f"ints of shape ({n}, {views}, 4)") from None
    if crops_arr.shape != (n, views, 4):
        raise invalid_argument("crops", f"array of shape {crops_arr.shape}",
                               f"it must have shape ({n}, {views}, 4): a box (top, left, height, "
                               f"width) per record and view, {views} views as outs has",
                               "Give each record one box a view ([0, 0, 0, 0]: the whole image).")
    try:
        flips_arr = np.ascontiguousarray(flips, dtype=np.bool_)
    except (TypeError, ValueError):
        raise invalid_type("flips", flips, f"booleans of shape ({n}, {views})") from None
    if flips_arr.shape != (n, views):
        raise invalid_argument("flips", f"array of shape {flips_arr.shape}",
                               f"it must have shape ({n}, {views}): a flag per record and view",
                               "Give each record one flag a view.")
    return crops_arr, flips_arr


def _per_view(name: str, value: object, views: int) -> tuple[object | None, ...]:
    """planars or programs: None (none for any view) or a sequence of V entries (None: none)."""
    if value is None:
        return (None,) * views
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise invalid_type(name, value, f"None or a sequence of {views} entries, one a view")
    if len(value) != views:
        raise invalid_argument(name, f"{len(value)} entries", f"it must have one entry a view "
                               f"({views}, as outs has)", "Give None for a view without one.")
    return tuple(value)


def check_program(name: str, program: object, n: int) -> PixelProgram:
    """A PixelProgram of n rows (one a record): decode_into's program or a view's programs[v]."""
    if not isinstance(program, PixelProgram):
        raise invalid_type(name, program, "a fastloader.decode.pixels.PixelProgram (or None)")
    if program.size != n:
        raise invalid_argument(name, f"a PixelProgram of {program.size} rows",
                               f"it must hold one row a record ({n})",
                               "Draw it with fastloader.decode.pixels.draw_program for this batch.")
    return program


def check_views(records: object, crops: npt.ArrayLike, flips: npt.ArrayLike, outs: object,
                planars: object, programs: object, scale: object, shift: object,
                orientations: object) -> ViewBatch:
    """decode_views_into's arguments checked in full, before any decode."""
    n = check_records(records)
    arrays = _check_outs(outs, n)
    views = len(arrays)
    crops_arr, flips_arr = _check_boxes(crops, flips, n, views)
    targets = [None if t is None else as_array(
        f"planars[{v}]", t, "a float32 or uint8 numpy array or CPU tensor (N, 3, H, W), or None")
               for v, t in enumerate(_per_view("planars", planars, views))]
    if (scale is not None or shift is not None) and not any(
            t is not None and t.dtype == np.float32 for t in targets):
        raise invalid_argument("scale", scale, "scale and shift need a float32 planar output",
                               "Pass a float32 array in planars=, or drop scale/shift.")
    checked_planars: list[np.ndarray | None] = []
    scale_arr, shift_arr = affine("scale", scale), affine("shift", shift)
    for v, target in enumerate(targets):  # a uint8 target takes the pixels as they are
        as_float = target is not None and target.dtype == np.float32
        conversion = None if target is None else check_planar(
            target, arrays[v], scale if as_float else None, shift if as_float else None,
            f"planars[{v}]")
        checked_planars.append(None if conversion is None else conversion[0])
    _check_apart([*((f"outs[{v}]", a) for v, a in enumerate(arrays)),
                  *((f"planars[{v}]", p) for v, p in enumerate(checked_planars))])
    checked_programs = tuple(None if p is None else check_program(f"programs[{v}]", p, n)
                             for v, p in enumerate(_per_view("programs", programs, views)))
    turns = None if orientations is None else check_orientations(orientations, n)
    return ViewBatch(crops_arr, flips_arr, arrays, tuple(checked_planars), checked_programs,
                     scale_arr, shift_arr, turns)
