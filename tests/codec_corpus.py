"""The coeffs codec's JPEG corpus (every kind the record decoder supports, generated) and its
kernel switch, shared by the codec's exactness tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pytest

from imagegen import encode, photo_like
from jpeg_writer import write_jpeg

SIZES = ((1, 1), (2, 2), (5, 3), (7, 13), (17, 33), (37, 53), (64, 48), (3, 300), (121, 161))
# Pillow's encoder: (name, mode, save options).
PILLOW_KINDS = (
    ("444", "RGB", {"subsampling": 0}),
    ("422", "RGB", {"subsampling": 1}),
    ("420", "RGB", {"subsampling": 2}),
    ("grey", "L", {}),
    ("rgb", "RGB", {"subsampling": 0, "keep_rgb": True}),
    ("prog420", "RGB", {"progressive": True}),
    ("prog444", "RGB", {"progressive": True, "subsampling": 0}),
    ("proggrey", "L", {"progressive": True}),
    ("rst420", "RGB", {"restart_marker_blocks": 2}),
    ("rstrows422", "RGB", {"restart_marker_rows": 1, "subsampling": 1}),
    ("cmyk444", "CMYK", {"subsampling": 0}),
    ("cmyk420", "CMYK", {"subsampling": 2}),
    ("progcmyk", "CMYK", {"progressive": True, "subsampling": 1}),
)
# jpeg_writer's factor sets: what Pillow cannot write.
WRITER_KINDS = (
    ("440", ((1, 2), (1, 1), (1, 1))),
    ("411", ((4, 1), (1, 1), (1, 1))),
    ("410", ((4, 2), (1, 1), (1, 1))),
    ("h3", ((3, 1), (1, 1), (1, 1))),
    ("v4", ((1, 4), (1, 2), (1, 1))),
    ("mixed", ((2, 2), (1, 2), (2, 1))),
    ("422v2", ((2, 2), (2, 1), (2, 1))),
    ("chroma-full", ((1, 1), (1, 1), (1, 1))),
)


def corpus(sizes: Sequence[tuple[int, int]] = SIZES) -> list[tuple[str, bytes]]:
    """(name, JPEG) of every kind at every size: named kind-HxW."""
    items = []
    for height, width in sizes:
        pixels = photo_like(height, width, seed=height * 7 + width)
        for name, mode, options in PILLOW_KINDS:
            items.append((f"{name}-{height}x{width}",
                          encode(pixels, "JPEG", mode, quality=90, **options)))
        for name, factors in WRITER_KINDS:
            items.append((f"{name}-{height}x{width}", write_jpeg(pixels, factors)))
            items.append((f"rst1-{name}-{height}x{width}", write_jpeg(pixels, factors, restart=1)))
        items.append((f"wgrey-rst3-{height}x{width}", write_jpeg(pixels[..., 1], restart=3)))
        cmyk = np.concatenate([pixels, pixels[..., 1:2]], axis=2)
        for ycck in (False, True):
            items.append((f"w{'ycck' if ycck else 'cmyk'}-{height}x{width}",
                          write_jpeg(cmyk, ((2, 2), (1, 1), (1, 2), (2, 1)), ycck=ycck,
                                     restart=2)))
    return items


@contextmanager
def kernel_set(avx2: bool) -> Iterator[bool]:
    """The AVX2 reconstruction kernels (where the CPU has them) or the scalar ones, for a block."""
    from fastloader import _core

    old = _core.coeffs_set_simd(avx2)
    try:
        if avx2 and not _core.coeffs_simd():
            pytest.skip("this CPU has no AVX2: only the scalar kernels run")
        yield avx2
    finally:
        _core.coeffs_set_simd(old)
