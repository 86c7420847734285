"""apply_program: a PixelProgram on a uint8 NHWC batch in place, natively or by Pillow."""

from __future__ import annotations

import numpy as np

from fastloader.decode import _native
from fastloader.decode.pixels.codes import PixelProgram, check_images
from fastloader.decode.pixels.reference import apply_program_reference
from fastloader.errors import invalid_argument


def apply_program(images: np.ndarray, program: PixelProgram, num_threads: int = 1) -> np.ndarray:
    """Run `program` on uint8 [N, H, W, 3] `images` in place; returns `images`.

    Native (`_core.apply_pixel_program`, GIL released, `num_threads` threads) when the extension
    is available, else Pillow (`apply_program_reference`); the same pixels within one level.
    """
    check_images(images, program)
    if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) \
            or num_threads < 1:
        raise invalid_argument("num_threads", num_threads, "must be an int >= 1",
                               "Pass num_threads=1 or more.")
    core = _native.native_module()
    if core is None:
        return apply_program_reference(images, program)
    if program.codes.shape[1]:
        core.apply_pixel_program(images, program.codes, program.params, int(num_threads))
    return images
