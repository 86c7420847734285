"""apply_program_torch: a PixelProgram on a uint8 NCHW batch on any torch device, batched.

Step k of the program runs as one launch per op kind among the samples taking that op at step
k, each sample with its own parameters (a [M] slice of the program's params moved once to the
device): the CPU path's semantics (Pillow's definitions, fastloader.decode.pixels) within two
levels, so the same program drawn on the host runs on either side.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from fastloader.decode.pixels import codes as C
from fastloader.decode.pixels.codes import PixelProgram
from fastloader.errors import invalid_argument, invalid_type
from fastloader.gpu import pixel_kernels as K
from fastloader.gpu import pixel_spatial as S

Kernel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KERNELS: dict[int, Kernel] = {
    C.BRIGHTNESS: K.brightness, C.CONTRAST: K.contrast, C.SATURATION: K.saturation,
    C.HUE: K.hue, C.GRAYSCALE: K.grayscale, C.BLUR: S.gaussian_blur, C.SOLARIZE: K.solarize,
    C.POSTERIZE: K.posterize, C.AUTOCONTRAST: K.autocontrast, C.EQUALIZE: K.equalize,
    C.ERASE: K.erase, C.SHARPNESS: S.sharpness, C.INVERT: K.invert,
    **{code: partial(S.geometric, code=code)
       for code in (C.SHEAR_X, C.SHEAR_Y, C.TRANSLATE_X, C.TRANSLATE_Y, C.ROTATE)},
}


def _check(images: object, program: object) -> torch.Tensor:
    if not isinstance(program, PixelProgram):
        raise invalid_type("program", program, "a PixelProgram (from draw_program)")
    if not isinstance(images, torch.Tensor):
        raise invalid_type("images", images, "a uint8 torch tensor [N, 3, H, W]")
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise invalid_argument("images", f"{images.dtype} {tuple(images.shape)}",
                               "must be uint8 [N, 3, H, W]",
                               "Run the pixel program before normalising to float.")
    if images.shape[0] != program.size:
        raise invalid_argument("images", f"{images.shape[0]} images",
                               f"the program has {program.size} samples",
                               "Draw the program for this batch's keys.")
    return images


def apply_program_torch(images: torch.Tensor, program: PixelProgram) -> torch.Tensor:
    """`program` run on uint8 [N, 3, H, W] `images` (any device); a new tensor is returned."""
    out = _check(images, program).clone()
    if program.is_empty():
        return out
    params = torch.from_numpy(program.params).to(out.device, non_blocking=True)
    for step in range(program.codes.shape[1]):
        column = program.codes[:, step]
        for code in np.unique(column).tolist():
            kernel = KERNELS.get(code)
            if kernel is None:  # 0 (no op) or a code this version does not know, as natively
                continue
            rows = torch.from_numpy(np.flatnonzero(column == code)).to(out.device)
            out[rows] = kernel(out[rows], params[rows, step])
    return out
