"""torchvision's augmentation spaces: each policy op's code, magnitude bins and sign rule.

Magnitudes are float32 as torch.linspace makes them (torchvision reads them back with .item()),
so a drawn magnitude is the very number torchvision would pass to its PIL op.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fastloader.decode.pixels import codes as C

# How a policy's signed magnitude m becomes the step's p0.
AS_IS, ENHANCE, WHOLE = 0, 1, 2  # m; 1.0 + m (a factor); int(m) (pixels, bits)

_OPS = {  # name: (code, conversion)
    "Identity": (C.NONE, AS_IS), "ShearX": (C.SHEAR_X, AS_IS), "ShearY": (C.SHEAR_Y, AS_IS),
    "TranslateX": (C.TRANSLATE_X, WHOLE), "TranslateY": (C.TRANSLATE_Y, WHOLE),
    "Rotate": (C.ROTATE, AS_IS), "Brightness": (C.BRIGHTNESS, ENHANCE),
    "Color": (C.SATURATION, ENHANCE), "Contrast": (C.CONTRAST, ENHANCE),
    "Sharpness": (C.SHARPNESS, ENHANCE), "Posterize": (C.POSTERIZE, WHOLE),
    "Solarize": (C.SOLARIZE, AS_IS), "AutoContrast": (C.AUTOCONTRAST, AS_IS),
    "Equalize": (C.EQUALIZE, AS_IS), "Invert": (C.INVERT, AS_IS),
}
_SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
           "Contrast", "Sharpness"}
_NO_MAGNITUDE = {"Identity", "AutoContrast", "Equalize", "Invert"}


def linspace32(start: float, end: float, steps: int) -> np.ndarray:
    """torch.linspace in float32: start + i*step in the first half, end - (steps-1-i)*step after,
    each rounded once (torch's vectorised CPU kernel fuses the multiply-add)."""
    start32, end32 = np.float32(start), np.float32(end)
    step = np.float64(np.float32((end32 - start32) / np.float32(steps - 1)))
    index = np.arange(steps)
    low = np.float64(start32) + step * index  # exact products of a float32 and a small int
    high = np.float64(end32) - step * (steps - 1 - index)
    return np.where(index < steps // 2, low, high).astype(np.float32)


def _posterize_bins(num_bins: int, levels: int) -> np.ndarray:
    """8 - round(arange(num_bins) / ((num_bins - 1) / levels)), in float32, half to even."""
    ratio = np.arange(num_bins, dtype=np.float32) / np.float32((num_bins - 1) / levels)
    return (8 - np.round(ratio)).astype(np.float32)


@dataclass(frozen=True)
class Space:
    """One policy's op table: row i is op names[i]."""

    names: tuple[str, ...]
    codes: np.ndarray        # int32 [ops]
    conversions: np.ndarray  # int8 [ops]: AS_IS, ENHANCE, WHOLE
    signed: np.ndarray       # bool [ops]
    magnitudes: np.ndarray   # float32 [ops, bins] (zeros for ops without a magnitude)

    def steps(self, op: np.ndarray, bins: np.ndarray, negative: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        """The codes and p0 of ops `op` at magnitude bins `bins`, negated where `negative`."""
        magnitude = self.magnitudes[op, bins].astype(np.float64)
        magnitude = np.where(negative & self.signed[op], -magnitude, magnitude)
        conversion = self.conversions[op]
        value = np.where(conversion == ENHANCE, 1.0 + magnitude,
                         np.where(conversion == WHOLE, np.trunc(magnitude), magnitude))
        return self.codes[op], value.astype(np.float32)


def _space(names: tuple[str, ...], tables: dict[str, np.ndarray], bins: int) -> Space:
    magnitudes = np.zeros((len(names), bins), np.float32)
    for row, name in enumerate(names):
        if name not in _NO_MAGNITUDE:
            magnitudes[row] = tables[name]
    return Space(names, np.array([_OPS[n][0] for n in names], np.int32),
                 np.array([_OPS[n][1] for n in names], np.int8),
                 np.array([n in _SIGNED for n in names]), magnitudes)


_BASIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
          "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")


@lru_cache(maxsize=64)  # a loader draws every batch at the same sizes
def trivial_wide(bins: int) -> Space:
    """TrivialAugmentWide's space (its wide ranges, translations in fixed pixels)."""
    wide = linspace32(0.0, 0.99, bins)
    tables = {"ShearX": wide, "ShearY": wide, "TranslateX": linspace32(0.0, 32.0, bins),
              "TranslateY": linspace32(0.0, 32.0, bins), "Rotate": linspace32(0.0, 135.0, bins),
              "Brightness": wide, "Color": wide, "Contrast": wide, "Sharpness": wide,
              "Posterize": _posterize_bins(bins, 6), "Solarize": linspace32(255.0, 0.0, bins)}
    return _space(("Identity", *_BASIC), tables, bins)


def _standard_tables(bins: int, height: int, width: int) -> dict[str, np.ndarray]:
    """RandAugment's and AutoAugment's ranges (translations relative to the image)."""
    narrow = linspace32(0.0, 0.9, bins)
    return {"ShearX": linspace32(0.0, 0.3, bins), "ShearY": linspace32(0.0, 0.3, bins),
            "TranslateX": linspace32(0.0, 150.0 / 331.0 * width, bins),
            "TranslateY": linspace32(0.0, 150.0 / 331.0 * height, bins),
            "Rotate": linspace32(0.0, 30.0, bins), "Brightness": narrow, "Color": narrow,
            "Contrast": narrow, "Sharpness": narrow, "Posterize": _posterize_bins(bins, 4),
            "Solarize": linspace32(255.0, 0.0, bins)}


@lru_cache(maxsize=64)  # a loader draws every batch at the same sizes
def rand_augment(bins: int, height: int, width: int) -> Space:
    """RandAugment's space."""
    return _space(("Identity", *_BASIC), _standard_tables(bins, height, width), bins)


@lru_cache(maxsize=64)  # a loader draws every batch at the same sizes
def auto_augment(height: int, width: int) -> Space:
    """AutoAugment's space: 10 bins, and Invert."""
    return _space((*_BASIC, "Invert"), _standard_tables(10, height, width), 10)


# AutoAugment's ImageNet policy: 25 sub-policies of two (op, probability, magnitude bin).
IMAGENET_POLICY: tuple[tuple[tuple[str, float, int | None], ...], ...] = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)
POLICIES = {"imagenet": IMAGENET_POLICY}
