"""Pixel-value augmentations with per-sample randomness: ops, drawing, Pillow reference, native.

The ops (torchvision's names and arguments, each with its own `p`): ColorJitter,
RandomGrayscale, GaussianBlur, RandomSolarize, RandomPosterize, RandomAutocontrast,
RandomEqualize, RandomErasing, TrivialAugmentWide, RandAugment, AutoAugment("imagenet").

`draw_program(ops, seed, epoch, keys, view, height, width)` draws a batch's `PixelProgram`:
`codes` int32 [N, K] and `params` float32 [N, K, 8], row n being sample n's steps in order, then
zeros (K = the most steps any sample takes). Draws are splitmix64 hashes of (seed, epoch, key,
view, draw number) (draws.py): a sample's row depends on nothing else. `apply_program(images,
program, num_threads)` runs it on uint8 [N, H, W, 3] images in place (native
`_core.apply_pixel_program`, GIL released; else `apply_program_reference`, Pillow's own
functions); `fastloader.gpu.pixel_program.apply_program_torch` runs it on a device batch.

Op codes (codes.py, csrc/pixel_ops.h) and their params (p0..p7; unused ones are 0):

| code | op | params | Pillow definition |
|---|---|---|---|
| 0 | none | | |
| 1 | brightness | p0 factor | ImageEnhance.Brightness(im).enhance(p0) |
| 2 | contrast | p0 factor | ImageEnhance.Contrast |
| 3 | saturation | p0 factor | ImageEnhance.Color |
| 4 | hue | p0 in [-0.5, 0.5] | convert("HSV"), H += uint8(p0 * 255), convert("RGB") |
| 5 | grayscale | | convert("L") in three bands |
| 6 | blur | p0 radius | ImageFilter.GaussianBlur(radius=p0) (sigma = radius) |
| 7 | solarize | p0 threshold | ImageOps.solarize(im, p0) |
| 8 | posterize | p0 bits | ImageOps.posterize(im, int(p0)) |
| 9 | autocontrast | | ImageOps.autocontrast(im) |
| 10 | equalize | | ImageOps.equalize(im) |
| 11 | erase | p0 top, p1 left, p2 h, p3 w, p4..p6 R, G, B | the box filled with the colour |
| 12 | sharpness | p0 factor | ImageEnhance.Sharpness |
| 13 | invert | | ImageOps.invert |
| 14, 15 | shear x, y | p0 magnitude m | shear degrees(atan(m)) about (0, 0), NEAREST, fill 0 |
| 16, 17 | translate x, y | p0 pixels | affine translate, NEAREST, fill 0 |
| 18 | rotate | p0 degrees | Image.rotate(p0, NEAREST, fillcolor=0) |

GaussianBlur is Pillow's GaussianBlur(radius=sigma), not torchvision's truncated tensor kernel
(`kernel_size` is checked but the extent follows sigma). RandomErasing's `value` is in pixel
levels (0..255, or an (R, G, B) triple) on every path; torchvision's value=0 after Normalize is
the mean colour, which here is value=(mean levels).
"""

from __future__ import annotations

from fastloader.decode.pixels.apply import apply_program, apply_program_reference
from fastloader.decode.pixels.codes import PixelProgram
from fastloader.decode.pixels.ops import (
    ColorJitter,
    GaussianBlur,
    PixelTransform,
    RandomAutocontrast,
    RandomEqualize,
    RandomErasing,
    RandomGrayscale,
    RandomPosterize,
    RandomSolarize,
)
from fastloader.decode.pixels.policies import AutoAugment, RandAugment, TrivialAugmentWide
from fastloader.decode.pixels.program import (
    check_pixel_transforms,
    draw_program,
    is_pixel_transform,
)

__all__ = [
    "AutoAugment", "ColorJitter", "GaussianBlur", "PixelProgram", "PixelTransform", "RandAugment",
    "RandomAutocontrast", "RandomEqualize", "RandomErasing", "RandomGrayscale", "RandomPosterize",
    "RandomSolarize", "TrivialAugmentWide", "apply_program", "apply_program_reference",
    "check_pixel_transforms", "draw_program", "is_pixel_transform",
]
