"""Each pixel op against Pillow's own functions at fixed parameters (torchvision's PIL path,
written out in pixel_cases.py), through the reference and natively; native == reference on 1 and
2 threads; the AVX2 kernels against the scalar ones; the batch checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from PIL import Image

from fastloader.decode import pixels as P
from fastloader.decode.pixels import codes as C
from pixel_cases import (
    ALL_OPS,
    IMAGES,
    NATIVE_EXACT_PARAMS,
    PARAMS,
    batch_of,
    erase_box,
    expected,
    mae,
    program_of,
    tolerance,
)


@pytest.mark.native_neutral
@pytest.mark.parametrize("code, value, pillow, tol, name", PARAMS)
def test_reference_matches_pillow(code: int, value: float, pillow: Callable, tol: float,
                                  name: str) -> None:
    batch = IMAGES[name][None].copy()
    P.apply_program_reference(batch, program_of(code, value))
    assert mae(batch[0], expected(IMAGES[name], pillow, value)) <= tol


@pytest.mark.native
@pytest.mark.parametrize("code, value, pillow, tol, name", PARAMS)
def test_native_matches_pillow(code: int, value: float, pillow: Callable, tol: float,
                               name: str) -> None:
    from fastloader.decode import _native

    core = _native.require_native()
    batch = IMAGES[name][None].copy()
    program = program_of(code, value)
    core.apply_pixel_program(batch, program.codes, program.params, 1)
    assert mae(batch[0], expected(IMAGES[name], pillow, value)) <= tol


@pytest.mark.native
@pytest.mark.parametrize("code, value, pillow, tol, name", NATIVE_EXACT_PARAMS)
def test_native_exact_ops_equal_pillow_to_the_byte(code: int, value: float, pillow: Callable,
                                                     tol: float, name: str) -> None:
    from fastloader.decode import _native

    core = _native.require_native()
    batch = IMAGES[name][None].copy()
    program = program_of(code, value)
    core.apply_pixel_program(batch, program.codes, program.params, 1)
    assert np.array_equal(batch[0], expected(IMAGES[name], pillow, value))


@pytest.mark.native_neutral
@pytest.mark.parametrize("name", list(IMAGES))
def test_erase_fills_the_box_with_value_levels(name: str) -> None:
    batch = IMAGES[name][None].copy()
    P.apply_program_reference(batch, program_of(C.ERASE, 0.0))
    assert np.array_equal(batch[0], np.asarray(erase_box(Image.fromarray(IMAGES[name]))))


@pytest.mark.native
@pytest.mark.parametrize("threads", [1, 2])
def test_native_equals_reference_on_drawn_programs(threads: int) -> None:
    from fastloader.decode import _native

    core = _native.require_native()
    images = batch_of(24, 40, 52)
    program = P.draw_program(ALL_OPS, seed=3, epoch=1, keys=np.arange(24), view=0,
                             height=40, width=52)
    native, reference = images.copy(), images.copy()
    core.apply_pixel_program(native, program.codes, program.params, threads)
    P.apply_program_reference(reference, program)
    for index in range(24):  # within a level a sample (2 where it took a blur or a hue step)
        assert mae(native[index], reference[index]) <= tolerance(program.codes[index]), index


@pytest.mark.native
def test_native_thread_counts_agree_to_the_byte() -> None:
    from fastloader.decode import _native

    core = _native.require_native()
    # Many samples, each taking the ops that use the thread's scratch (blur, geometry): a
    # scratch shared between threads shows as differing bytes.
    ops = [*ALL_OPS, P.GaussianBlur(sigma=(1.0, 3.0)), P.TrivialAugmentWide()]
    images = batch_of(96, 64, 72)
    program = P.draw_program(ops, seed=5, epoch=0, keys=np.arange(96) * 7, view=1,
                             height=64, width=72)
    one, two = images.copy(), images.copy()
    core.apply_pixel_program(one, program.codes, program.params, 1)
    core.apply_pixel_program(two, program.codes, program.params, 2)
    assert np.array_equal(one, two)
    assert not np.array_equal(one, images)


@pytest.mark.native
@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (3, 2), (1, 9)])
def test_native_tiny_images_equal_the_reference(shape: tuple[int, int]) -> None:
    from fastloader.decode import _native

    core = _native.require_native()
    rng = np.random.default_rng(0)
    codes = np.arange(1, C.CODE_COUNT, dtype=np.int32)[None].repeat(2, 0)
    params = np.zeros((2, codes.shape[1], 8), np.float32)
    params[:, :, 0] = [1.3, 0.7, 1.5, 0.2, 0, 1.1, 100, 3, 0, 0, 0, 1.8, 0, 0.3, 0.2, 1, -1, 20]
    params[:, C.ERASE - 1, :7] = (0, 0, 1, 1, 9, 8, 7)
    images = rng.integers(0, 256, (2, *shape, 3), dtype=np.uint8)
    native, reference = images.copy(), images.copy()
    program = P.PixelProgram(codes, params)
    core.apply_pixel_program(native, codes, params, 2)
    P.apply_program_reference(reference, program)
    assert mae(native, reference) <= 2


def test_apply_program_runs_the_program_in_place() -> None:
    images = batch_of(6, 30, 30)
    program = P.draw_program(ALL_OPS, seed=1, epoch=2, keys=np.arange(6), view=0,
                             height=30, width=30)
    expected = P.apply_program_reference(images.copy(), program)
    out = P.apply_program(images, program, num_threads=2)
    assert out is images
    assert mae(images, expected) <= 2


@pytest.mark.native_neutral
def test_apply_program_reference_refuses_bad_batches() -> None:
    program = program_of(C.INVERT, 0.0, n=2)
    with pytest.raises(ValueError, match="images"):
        P.apply_program_reference(np.zeros((2, 4, 4, 4), np.uint8), program)
    with pytest.raises(ValueError, match="images"):
        P.apply_program_reference(np.zeros((3, 4, 4, 3), np.uint8), program)
    with pytest.raises(ValueError, match="images"):
        P.apply_program_reference(np.zeros((2, 4, 8, 3), np.uint8)[:, :, ::2], program)
    with pytest.raises(TypeError, match="program"):
        P.apply_program_reference(np.zeros((2, 4, 4, 3), np.uint8), "invert")  # type: ignore


@contextmanager
def pixel_kernels(avx2: bool) -> Iterator[None]:
    """The AVX2 pixel kernels (where the CPU has them) or the scalar ones, for a block."""
    from fastloader import _core

    old = _core.pixel_set_simd(avx2)
    try:
        if avx2 and not _core.pixel_simd():
            pytest.skip("this CPU has no AVX2: only the scalar kernels run")
        yield
    finally:
        _core.pixel_set_simd(old)


def run_both(images: np.ndarray, program: P.PixelProgram) -> tuple[np.ndarray, np.ndarray]:
    """The batch through the AVX2 kernels and through the scalar ones."""
    from fastloader import _core

    outs = []
    for avx2 in (True, False):
        with pixel_kernels(avx2):
            out = images.copy()
            _core.apply_pixel_program(out, program.codes, program.params, 1)
            outs.append(out)
    return outs[0], outs[1]


# Each vector kernel with parameters that take every branch (factors inside and outside [0, 1],
# small and large blur radii), on an odd width so that the scalar tails run as well.
SIMD_CASES = [(C.HUE, 0.1), (C.HUE, -0.43), (C.HUE, 0.5), (C.BLUR, 0.1), (C.BLUR, 0.7),
              (C.BLUR, 2.0), (C.BLUR, 9.0), (C.BLUR, 40.0), (C.BRIGHTNESS, 0.6),
              (C.BRIGHTNESS, 1.4), (C.CONTRAST, 0.5), (C.CONTRAST, 1.6), (C.CONTRAST, -0.4),
              (C.SATURATION, 0.0), (C.SATURATION, 0.7), (C.SATURATION, 1.7),
              (C.SATURATION, -0.3), (C.SHARPNESS, 0.1), (C.SHARPNESS, 1.0), (C.SHARPNESS, 1.9),
              (C.SHARPNESS, 3.5)]


@pytest.mark.native
@pytest.mark.parametrize("code, value", SIMD_CASES)
def test_avx2_and_scalar_kernels_give_the_same_bytes(code: int, value: float) -> None:
    images = batch_of(3, 37, 61)
    avx2, scalar = run_both(images, program_of(code, value, n=3))
    assert np.array_equal(avx2, scalar)
    # (a copy, as in Pillow: blur radius 0.1's edge weight rounds away, sharpness 1 is the image)
    assert not np.array_equal(avx2, images) or (code, value) in {(C.BLUR, 0.1), (C.SHARPNESS, 1.0)}


@pytest.mark.native
@pytest.mark.parametrize("value", [0.0, 0.27])
def test_hue_kernels_agree_on_every_colour(value: float) -> None:
    # Every RGB colour once: the RGB -> HSV half sees its whole domain.
    colours = np.arange(1 << 24, dtype=np.uint32)
    image = np.stack([colours >> 16, (colours >> 8) & 255, colours & 255], -1).astype(np.uint8)
    avx2, scalar = run_both(image.reshape(1, 4096, 4096, 3), program_of(C.HUE, value))
    assert np.array_equal(avx2, scalar)


@pytest.mark.native
@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (3, 2), (8, 8), (9, 17), (17, 9), (16, 6)])
def test_avx2_and_scalar_kernels_agree_on_small_images(shape: tuple[int, int]) -> None:
    # Sizes around the vectors' 8 pixels, 8 rows and 16 bytes: all tail, exact fit, one over.
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (2, *shape, 3), dtype=np.uint8)
    for code, value in SIMD_CASES:
        avx2, scalar = run_both(images, program_of(code, value, n=2))
        assert np.array_equal(avx2, scalar), (code, value)
