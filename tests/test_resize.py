"""The native resize (csrc/resize*.cpp) against Pillow's BILINEAR; SIMD and scalar kernels agree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastloader.decode import _native
from jpeg_corpus import photo_jpeg
from test_decode import pillow_reference

SOURCE = (120, 160)  # (height, width) of the test photo
# (crop (top, left, h, w), output (h, w)): up- and downscale on each axis, one axis unchanged,
# odd and tiny sizes, and downscales past 2.5x (windows wider than the 5-tap SIMD kernel).
CASES = [
    ((0, 0, 120, 160), (224, 224)),
    ((10, 7, 37, 53), (224, 224)),
    ((5, 3, 110, 150), (61, 47)),
    ((0, 0, 120, 160), (120, 77)),
    ((0, 0, 120, 160), (45, 160)),
    ((20, 30, 90, 101), (90, 33)),
    ((1, 2, 100, 9), (31, 200)),
    ((3, 4, 7, 150), (150, 7)),
    ((0, 0, 120, 160), (11, 13)),
    ((0, 0, 120, 160), (1, 1)),
    ((50, 60, 1, 1), (5, 3)),
    ((2, 2, 115, 140), (40, 150)),
    ((2, 2, 115, 140), (150, 40)),
    ((0, 1, 119, 158), (100, 97)),
]


def native_outputs(data: bytes) -> list[np.ndarray]:
    core = _native.require_native()
    outs = []
    for crop, size in CASES:
        for flip in (False, True):
            out = np.empty((*size, 3), np.uint8)
            assert core.decode_into(data, crop, flip, out, dct_scaling=False) is None
            outs.append(out)
    return outs


@pytest.fixture(scope="module")
def photo() -> bytes:
    return photo_jpeg(*SOURCE, seed=11)


@pytest.mark.native
def test_resize_matches_pillow_within_one_level(photo):
    # Each pass is Pillow's integer arithmetic with 14-bit instead of 22-bit weights; that and
    # running the vertical pass first (when that is less work) may move a pixel by one level,
    # never more: 7.0% of values on 150 benchmark photos' RandomResizedCrops (6.8% with 22).
    outs = iter(native_outputs(photo))
    for crop, size in CASES:
        for flip in (False, True):
            got = next(outs).astype(np.int16)
            diff = np.abs(got - pillow_reference(photo, crop, size, flip))
            assert diff.max() <= 1, (crop, size, flip)
            assert diff.mean() <= 0.3, (crop, size, flip, diff.mean())


@pytest.mark.native
def test_upscale_is_pillow_but_for_rare_one_level_steps(photo):
    # Upscaling on both axes runs horizontal first, Pillow's order; the only difference left is
    # the weights' 14 fixed-point bits against Pillow's 22 (resize.h), which moves a sum across
    # a rounding step rarely: on 150 benchmark photos 0.84% of upscaled values, never by 2.
    crop, size = (10, 7, 37, 53), (224, 224)
    core = _native.require_native()
    for flip in (False, True):
        out = np.empty((*size, 3), np.uint8)
        assert core.decode_into(photo, crop, flip, out, dct_scaling=False) is None
        diff = np.abs(out.astype(np.int16) - pillow_reference(photo, crop, size, flip))
        assert diff.max() <= 1
        assert np.count_nonzero(diff) <= 0.01 * diff.size


@pytest.mark.native
def test_simd_and_scalar_kernels_give_identical_bytes(photo, tmp_path: Path):
    # FASTLOADER_RESIZE_SCALAR is read once per process, so the scalar run needs its own.
    script = (
        "import sys, numpy as np\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_resize import native_outputs\n"
        "from jpeg_corpus import photo_jpeg\n"
        f"outs = native_outputs(photo_jpeg({SOURCE[0]}, {SOURCE[1]}, seed=11))\n"
        f"np.savez({str(tmp_path / 'scalar.npz')!r}, *outs)\n"
    )
    env = dict(os.environ, FASTLOADER_RESIZE_SCALAR="1")
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    scalar = np.load(tmp_path / "scalar.npz")
    for k, out in enumerate(native_outputs(photo)):
        np.testing.assert_array_equal(out, scalar[f"arr_{k}"], err_msg=f"case {k}")
