"""apply_program_reference: a PixelProgram run by Pillow's own functions (the definitions).

Each step is the call torchvision's PIL path makes (ImageEnhance, ImageOps,
ImageFilter.GaussianBlur, Image.transform / Image.rotate NEAREST with fill 0), so this is the
reference every other path is tested against, and the Pillow backend's implementation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from fastloader.decode.pixels import codes as C
from fastloader.decode.pixels.codes import PixelProgram, check_images
from fastloader.decode.pixels.geometry import step_matrix

_BLACK = (0, 0, 0)


def hue_shift(factor: float) -> int:
    """The uint8 hue shift of a hue factor: int(factor * 255) mod 256 (torchvision's
    np.uint8(factor * 255) as x86 casts a negative float: truncated, then wrapped)."""
    return int(float(factor) * 255.0) % 256


def _hue(im: Image.Image, factor: float) -> Image.Image:
    hue, saturation, value = im.convert("HSV").split()
    shifted = np.asarray(hue, dtype=np.uint8) + np.uint8(hue_shift(factor))  # wraps mod 256
    return Image.merge("HSV", (Image.fromarray(shifted, "L"), saturation, value)).convert("RGB")


def _erase(im: Image.Image, p: np.ndarray) -> Image.Image:
    top, left, height, width = (int(v) for v in p[:4])
    im.paste((int(p[4]), int(p[5]), int(p[6])), (left, top, left + width, top + height))
    return im


def _solarize(im: Image.Image, threshold: float) -> Image.Image:
    # A float threshold, as torchvision passes its magnitudes (Pillow only compares with it).
    return ImageOps.solarize(im, threshold=threshold)  # type: ignore[arg-type]


def _geometric(im: Image.Image, code: int, p0: float) -> Image.Image:
    if code == C.ROTATE:
        return im.rotate(p0, Image.Resampling.NEAREST, expand=False, fillcolor=_BLACK)
    matrix = step_matrix(code, p0, im.height, im.width)
    return im.transform(im.size, Image.Transform.AFFINE, matrix, Image.Resampling.NEAREST,
                        fillcolor=_BLACK)


_Step = Callable[[Image.Image, np.ndarray], Image.Image]
_STEPS: dict[int, _Step] = {
    C.BRIGHTNESS: lambda im, p: ImageEnhance.Brightness(im).enhance(float(p[0])),
    C.CONTRAST: lambda im, p: ImageEnhance.Contrast(im).enhance(float(p[0])),
    C.SATURATION: lambda im, p: ImageEnhance.Color(im).enhance(float(p[0])),
    C.SHARPNESS: lambda im, p: ImageEnhance.Sharpness(im).enhance(float(p[0])),
    C.HUE: lambda im, p: _hue(im, float(p[0])),
    C.GRAYSCALE: lambda im, p: im.convert("L").convert("RGB"),
    C.BLUR: lambda im, p: im.filter(ImageFilter.GaussianBlur(radius=float(p[0]))),
    C.SOLARIZE: lambda im, p: _solarize(im, float(p[0])),
    C.POSTERIZE: lambda im, p: ImageOps.posterize(im, int(p[0])),
    C.AUTOCONTRAST: lambda im, p: ImageOps.autocontrast(im),
    C.EQUALIZE: lambda im, p: ImageOps.equalize(im),
    C.INVERT: lambda im, p: ImageOps.invert(im),
    C.ERASE: _erase,
    C.SHEAR_X: lambda im, p: _geometric(im, C.SHEAR_X, float(p[0])),
    C.SHEAR_Y: lambda im, p: _geometric(im, C.SHEAR_Y, float(p[0])),
    C.TRANSLATE_X: lambda im, p: _geometric(im, C.TRANSLATE_X, float(p[0])),
    C.TRANSLATE_Y: lambda im, p: _geometric(im, C.TRANSLATE_Y, float(p[0])),
    C.ROTATE: lambda im, p: _geometric(im, C.ROTATE, float(p[0])),
}


def apply_steps(im: Image.Image, codes: np.ndarray, params: np.ndarray) -> Image.Image:
    """One sample's steps on an RGB image; unknown codes are skipped, as natively."""
    for code, p in zip(codes.tolist(), params, strict=True):
        step = _STEPS.get(code)
        if step is not None:
            im = step(im, p)
    return im


def apply_program_reference(images: np.ndarray, program: PixelProgram) -> np.ndarray:
    """Run `program` on uint8 [N, H, W, 3] `images` in place, by Pillow; returns `images`."""
    check_images(images, program)
    for index in range(program.size):
        row = program.codes[index]
        if not row.any():
            continue
        image = Image.fromarray(images[index], "RGB")
        images[index] = np.asarray(apply_steps(image, row, program.params[index]))
    return images
