"""The inverse affine matrices torchvision's PIL path hands to Image.transform for the policy ops.

Pillow maps output pixel (x, y) to input (a*(x+.5) + b*(y+.5) + c, d*(x+.5) + e*(y+.5) + f) and
samples NEAREST with fill 0; the native and device paths take these very matrices (float64).
"""

from __future__ import annotations

import math

from fastloader.decode.pixels import codes as C

Matrix = tuple[float, float, float, float, float, float]


def inverse_affine(center: tuple[float, float], angle: float, translate: tuple[float, float],
                   shear: tuple[float, float]) -> Matrix:
    """torchvision's _get_inverse_affine_matrix at scale 1 (angle and shear in degrees)."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [d, -b, 0.0, -c, a, 0.0]
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty)
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty)
    m[2] += cx
    m[5] += cy
    return m[0], m[1], m[2], m[3], m[4], m[5]


def rotate_matrix(angle: float, height: int, width: int) -> Matrix:
    """Image.rotate(angle)'s matrix (expand=False, about the centre), without its fast paths."""
    center_x, center_y = width / 2.0, height / 2.0
    radians = -math.radians(angle)
    a, b = round(math.cos(radians), 15), round(math.sin(radians), 15)
    d, e = round(-math.sin(radians), 15), round(math.cos(radians), 15)
    c = a * -center_x + b * -center_y + center_x
    f = d * -center_x + e * -center_y + center_y
    return a, b, c, d, e, f


def rotate_fast_path(angle: float, height: int, width: int) -> int:
    """Image.rotate's exact shortcuts: 0 (copy), 180, 90 or 270 (square only); -1 for none."""
    turned = angle % 360.0
    if turned in (0.0, 180.0):
        return int(turned)
    if turned in (90.0, 270.0) and height == width:
        return int(turned)
    return -1


def step_matrix(code: int, p0: float, height: int, width: int) -> Matrix:
    """The matrix of one geometric step (SHEAR_X/Y, TRANSLATE_X/Y, ROTATE's general path)."""
    if code == C.SHEAR_X:
        return inverse_affine((0.0, 0.0), 0.0, (0.0, 0.0), (math.degrees(math.atan(p0)), 0.0))
    if code == C.SHEAR_Y:
        return inverse_affine((0.0, 0.0), 0.0, (0.0, 0.0), (0.0, math.degrees(math.atan(p0))))
    if code in (C.TRANSLATE_X, C.TRANSLATE_Y):
        shift = (p0, 0.0) if code == C.TRANSLATE_X else (0.0, p0)
        return inverse_affine((width * 0.5, height * 0.5), 0.0, shift, (0.0, 0.0))
    if code == C.ROTATE:
        return rotate_matrix(p0, height, width)
    raise ValueError(f"op code {code} is not geometric")
