"""Pixel programs fused into the batch decode: decode_into(program=) and decode_views_into(
programs=) run each decoded sample's ops in the decode worker (Pillow's definitions on the
Pillow path), before the channel-first copy; a failed sample is left zero."""

from __future__ import annotations

import numpy as np
import pytest

from fastloader.decode.decode import BatchDecoder
from fastloader.decode.pixels import (
    ColorJitter,
    GaussianBlur,
    PixelProgram,
    RandomErasing,
    RandomGrayscale,
    RandomSolarize,
    apply_program,
    apply_program_reference,
    codes,
    draw_program,
)
from fastloader.decode.views_pillow import apply_program_row
from jpeg_corpus import photo_jpeg

pytestmark = pytest.mark.wheel

N = 4
OPS = [ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), RandomGrayscale(p=0.2),
       GaussianBlur(sigma=(0.1, 2.0), p=0.5), RandomSolarize(128, p=0.5), RandomErasing(p=0.5)]


INVERT = 13  # csrc/pixel_ops.h's kPixelInvert: zeros become 255


def program(size: tuple[int, int], view: int = 0) -> PixelProgram:
    """The ops drawn for N samples; the last (a broken record) inverts, so ops run on its
    zeroed slot would show."""
    drawn = draw_program(OPS, seed=3, epoch=1, keys=np.arange(N, dtype=np.int64), view=view,
                         height=size[0], width=size[1])
    assert not drawn.is_empty()
    codes = drawn.codes.copy()
    codes[N - 1] = 0
    codes[N - 1, 0] = INVERT
    return PixelProgram(codes, drawn.params)


def apply_as_the_backend(images: np.ndarray, ops: PixelProgram, backend: str) -> None:
    """What a path's ops give: the native kernels, or Pillow's definitions."""
    if backend == "pillow":
        apply_program_reference(images, ops)
    else:
        apply_program(images, ops)


RECORDS = [photo_jpeg(160, 200, seed=s) for s in range(N - 1)] + [b"\xff\xd8\xff\xdbbroken"]
CROPS = np.array([[10, 20, 120, 150]] * N, np.int32)
FLIPS = np.array([True, False, True, False])


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_decode_into_runs_the_program_before_the_planar_copy(backend: str) -> None:
    size = (48, 56)
    ops = program(size)
    with BatchDecoder(2, backend) as decoder:
        plain = np.zeros((N, *size, 3), np.uint8)
        assert decoder.decode_into(RECORDS, CROPS, FLIPS, plain)[:3] == [None] * 3
        fused = np.full((N, *size, 3), 5, np.uint8)
        planar = np.zeros((N, 3, *size), np.uint8)
        errors = decoder.decode_into(RECORDS, CROPS, FLIPS, fused, planar=planar, program=ops)
    assert errors[:3] == [None] * 3 and isinstance(errors[3], str)
    want = plain.copy()
    apply_as_the_backend(want[:3], PixelProgram(ops.codes[:3], ops.params[:3]), backend)
    np.testing.assert_array_equal(fused[:3], want[:3])
    assert not np.array_equal(fused[:3], plain[:3])  # the ops did something
    assert not fused[3].any()  # a failed sample is zero, not zero run through the ops
    np.testing.assert_array_equal(planar, fused.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_each_view_runs_its_own_program(backend: str) -> None:
    sizes = [(64, 64), (24, 24), (24, 24)]
    boxes = [(0, 0, 160, 200), (30, 40, 70, 80), (90, 100, 60, 60)]
    crops = np.array([boxes] * N, np.int32)
    flips = np.zeros((N, 3), bool)
    programs = [program(sizes[0], view=0), None, program(sizes[2], view=2)]
    outs = [np.zeros((N, *s, 3), np.uint8) for s in sizes]
    planars = [np.zeros((N, 3, *sizes[0]), np.float32), None, None]
    with BatchDecoder(2, backend) as decoder:
        errors = decoder.decode_views_into(RECORDS, crops, flips, outs, programs=programs,
                                           planars=planars, scale=(2.0, 2.0, 2.0))
        assert errors[:3] == [None] * 3 and isinstance(errors[3], str)
        assert not any(out[3].any() for out in outs)  # the failed sample stays zero
        for v, size in enumerate(sizes):
            want = np.zeros((N, *size, 3), np.uint8)
            decoder.decode_into(RECORDS, crops[:, v], flips[:, v], want, program=programs[v])
            np.testing.assert_array_equal(outs[v], want, err_msg=f"view {v}")
    np.testing.assert_array_equal(planars[0], outs[0].transpose(0, 3, 1, 2) * np.float32(2))


@pytest.mark.native_neutral
def test_a_program_of_another_batch_is_refused() -> None:
    from fastloader.errors import InvalidArgumentError, InvalidTypeError

    with BatchDecoder(1, "pillow") as decoder:
        out = np.zeros((N, 8, 8, 3), np.uint8)
        crops, flips = np.zeros((N, 4)), np.zeros(N)
        with pytest.raises(InvalidArgumentError, match="program="):
            decoder.decode_into(RECORDS, crops, flips, out,
                                program=PixelProgram(np.zeros((N + 1, 1), np.int32),
                                                     np.zeros((N + 1, 1, 8), np.float32)))
        with pytest.raises(InvalidTypeError, match="program must"):
            decoder.decode_into(RECORDS, crops, flips, out, program=[1, 2])  # type: ignore[arg-type]


def test_the_pillow_path_skips_a_no_op_wherever_it_stands() -> None:
    """A program row with a no-op before a step (a hand-built one: draw_program packs rows to
    the front) runs that step on the Pillow path too, as the reference and native ops do."""
    images = np.random.default_rng(3).integers(0, 256, (1, 12, 10, 3), dtype=np.uint8)
    program = PixelProgram(np.array([[0, codes.GRAYSCALE]], np.int32),
                           np.zeros((1, 2, codes.PARAMS), np.float32))
    expected = apply_program_reference(images.copy(), program)
    slot = images[0].copy()
    apply_program_row(slot, program, 0)
    assert np.array_equal(slot, expected[0]) and not np.array_equal(slot, images[0])
