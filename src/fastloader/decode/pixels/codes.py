"""Op codes and the PixelProgram layout (mirrored by csrc/pixel_ops.h's PixelCode)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastloader.errors import invalid_argument, invalid_type

NONE = 0
BRIGHTNESS = 1      # p0 factor: ImageEnhance.Brightness
CONTRAST = 2        # p0 factor: ImageEnhance.Contrast
SATURATION = 3      # p0 factor: ImageEnhance.Color
HUE = 4             # p0 hue factor in [-0.5, 0.5]
GRAYSCALE = 5       # convert("L"), three equal bands
BLUR = 6            # p0 radius: ImageFilter.GaussianBlur(radius)
SOLARIZE = 7        # p0 threshold
POSTERIZE = 8       # p0 bits
AUTOCONTRAST = 9
EQUALIZE = 10
ERASE = 11          # p0 top, p1 left, p2 height, p3 width, p4..p6 fill R, G, B
SHARPNESS = 12      # p0 factor: ImageEnhance.Sharpness
INVERT = 13
SHEAR_X = 14        # p0 magnitude m: shear of degrees(atan(m)) about (0, 0)
SHEAR_Y = 15
TRANSLATE_X = 16    # p0 whole pixels
TRANSLATE_Y = 17
ROTATE = 18         # p0 degrees, counter-clockwise about the centre
CODE_COUNT = 19

NAMES = {
    NONE: "none", BRIGHTNESS: "brightness", CONTRAST: "contrast", SATURATION: "saturation",
    HUE: "hue", GRAYSCALE: "grayscale", BLUR: "blur", SOLARIZE: "solarize",
    POSTERIZE: "posterize", AUTOCONTRAST: "autocontrast", EQUALIZE: "equalize", ERASE: "erase",
    SHARPNESS: "sharpness", INVERT: "invert", SHEAR_X: "shear_x", SHEAR_Y: "shear_y",
    TRANSLATE_X: "translate_x", TRANSLATE_Y: "translate_y", ROTATE: "rotate",
}

PARAMS = 8  # floats a step


def _described(array: object) -> str:
    return f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray) else repr(array)


@dataclass(frozen=True)
class PixelProgram:
    """A batch's pixel ops: `codes` int32 [N, K] (0 = no op), `params` float32 [N, K, 8].

    Row n lists sample n's ops in the order they run, then zeros; K is the most ops any sample
    of the batch takes (it may be 0).
    """

    codes: np.ndarray
    params: np.ndarray

    def __post_init__(self) -> None:
        codes, params = self.codes, self.params
        if not isinstance(codes, np.ndarray) or codes.dtype != np.int32 or codes.ndim != 2:
            raise invalid_argument("PixelProgram.codes", _described(codes), "must be int32 [N, K]",
                                   "Build programs with draw_program.")
        if not isinstance(params, np.ndarray) or params.dtype != np.float32 \
                or params.shape != (*codes.shape, PARAMS):
            raise invalid_argument("PixelProgram.params", _described(params),
                                   f"must be float32 {(*codes.shape, PARAMS)}",
                                   "Build programs with draw_program.")

    @property
    def size(self) -> int:
        """The number of samples (N)."""
        return int(self.codes.shape[0])

    def sample(self, index: int) -> PixelProgram:
        """Sample `index`'s row alone, its trailing no-ops dropped (a program of one sample)."""
        row = self.codes[index]
        used = int(np.flatnonzero(row)[-1]) + 1 if row.any() else 0
        return PixelProgram(np.ascontiguousarray(row[None, :used]),
                            np.ascontiguousarray(self.params[index][None, :used]))

    def is_empty(self) -> bool:
        """Whether no sample takes any op."""
        return not bool(np.any(self.codes))


def check_images(images: object, program: PixelProgram) -> np.ndarray:
    """`images` as a writable C-contiguous uint8 [N, H, W, 3] array matching `program`'s N."""
    if not isinstance(program, PixelProgram):
        raise invalid_type("program", program, "a PixelProgram (from draw_program)")
    if not isinstance(images, np.ndarray):
        raise invalid_type("images", images, "a numpy uint8 array [N, H, W, 3]")
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        raise invalid_argument("images", f"{images.dtype} {images.shape}",
                               "must be uint8 [N, H, W, 3]", "Pass RGB uint8 NHWC images.")
    if not images.flags.c_contiguous or not images.flags.writeable:
        raise invalid_argument("images", "a strided or read-only array",
                               "must be C-contiguous and writable (the ops run in place)",
                               "Pass np.ascontiguousarray(images).")
    if images.shape[0] != program.size:
        raise invalid_argument("images", f"{images.shape[0]} images",
                               f"the program has {program.size} samples",
                               "Draw the program for this batch's keys.")
    return images
