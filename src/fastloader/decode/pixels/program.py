"""draw_program: a batch's pixel ops drawn per sample into one PixelProgram."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fastloader.checks import int_at_least
from fastloader.decode.pixels.codes import PARAMS, PixelProgram
from fastloader.decode.pixels.draws import OP_STRIDE, Draws
from fastloader.decode.pixels.ops import PixelTransform
from fastloader.errors import invalid_argument, invalid_type


def is_pixel_transform(obj: object) -> bool:
    """Whether `obj` is one of the pixel ops (ColorJitter, ..., AutoAugment)."""
    return isinstance(obj, PixelTransform)


def check_pixel_transforms(seq: object, name: str = "transforms") -> tuple[PixelTransform, ...]:
    """`seq` as a tuple of pixel ops, or an error naming the first item that is not one."""
    if isinstance(seq, PixelTransform):
        return (seq,)
    if isinstance(seq, (str, bytes)) or not isinstance(seq, Iterable):
        raise invalid_type(name, seq, "a sequence of pixel ops (ColorJitter, GaussianBlur, ...)")
    ops = tuple(seq)
    for index, op in enumerate(ops):
        if not isinstance(op, PixelTransform):
            raise invalid_type(f"{name}[{index}]", op,
                               "a pixel op (ColorJitter, RandomGrayscale, GaussianBlur, ...)")
    return ops


def _keys(keys: object) -> np.ndarray:
    array = np.asarray(keys)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise invalid_type("keys", keys, "a 1-D array of integer sample keys")
    return array.astype(np.int64, copy=False)


def _compact(codes: np.ndarray, params: np.ndarray) -> PixelProgram:
    """Each row's ops moved to its front in order (no-ops after), trimmed to the longest row."""
    taken = codes != 0
    order = np.argsort(~taken, axis=1, kind="stable")
    width = int(taken.sum(axis=1).max()) if codes.size else 0
    order = order[:, :width]
    packed = np.take_along_axis(codes, order, axis=1)
    packed_params = np.take_along_axis(params, order[:, :, None], axis=1)
    return PixelProgram(np.ascontiguousarray(packed, np.int32),
                        np.ascontiguousarray(packed_params, np.float32))


def draw_program(ops: Iterable[PixelTransform], seed: int, epoch: int, keys: object, view: int,
                 height: int, width: int) -> PixelProgram:
    """The pixel ops of N samples of height x width, each sample's steps a pure function of
    (seed, epoch, key, view): never of the batch's other samples or of thread counts.

    `keys` (int64 [N]) names each sample in the pass (the loader's sample index); `height` and
    `width` are the size of the images the program will run on (erase boxes and RandAugment's
    translations are drawn for it), so draw it for the output size of the crop.
    """
    transforms = check_pixel_transforms(ops, "ops")
    for name, value in (("seed", seed), ("epoch", epoch), ("view", view)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise invalid_type(name, value, "an int")
    height, width = int_at_least("height", height, 1), int_at_least("width", width, 1)
    array = _keys(keys)
    if len(transforms) * OP_STRIDE >= 1 << 62:
        raise invalid_argument("ops", len(transforms), "too many ops", "Pass fewer ops.")
    draws = Draws(int(seed), int(epoch), array, int(view))
    parts = [op.draw(draws.sub(index * OP_STRIDE), height, width)
             for index, op in enumerate(transforms)]
    n = array.shape[0]
    codes = np.concatenate([p[0] for p in parts], axis=1) if parts else np.zeros((n, 0), np.int32)
    params = (np.concatenate([p[1] for p in parts], axis=1) if parts
              else np.zeros((n, 0, PARAMS), np.float32))
    return _compact(codes, params)
