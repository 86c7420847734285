"""The device path (fastloader.gpu.pixel_program) against the CPU path: each op at fixed
parameters and drawn programs within MAE 2 (on the CPU device here, on CUDA where there is one),
a sample's pixels independent of its batch, and bad input refused naming the argument."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from fastloader.decode import pixels as P
from fastloader.decode.pixels import codes as C
from fastloader.errors import InvalidArgumentError, InvalidTypeError
from fastloader.gpu.pixel_program import apply_program_torch
from pixel_cases import (
    ALL_OPS,
    EXACT_PARAMS,
    IMAGES,
    PARAMS,
    batch_of,
    expected,
    mae,
    program_of,
)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device(name)


def _on_device(images: np.ndarray, program: P.PixelProgram, device: torch.device) -> np.ndarray:
    tensor = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous().to(device)
    return apply_program_torch(tensor, program).permute(0, 2, 3, 1).cpu().numpy()


@pytest.mark.native_neutral
@pytest.mark.parametrize("code, value, pillow, tol, name", PARAMS)
def test_device_op_matches_pillow(code: int, value: float, pillow: Callable, tol: float,
                                  name: str) -> None:
    out = _on_device(IMAGES[name][None].copy(), program_of(code, value), torch.device("cpu"))
    assert mae(out[0], expected(IMAGES[name], pillow, value)) <= 2


@pytest.mark.native_neutral
@pytest.mark.parametrize("code, value, pillow, tol, name", EXACT_PARAMS)
def test_device_integer_ops_equal_pillow_to_the_byte(code: int, value: float, pillow: Callable,
                                                     tol: float, name: str) -> None:
    out = _on_device(IMAGES[name][None].copy(), program_of(code, value), torch.device("cpu"))
    assert np.array_equal(out[0], expected(IMAGES[name], pillow, value))


@pytest.mark.native_neutral
@pytest.mark.parametrize("device", DEVICES)
def test_device_matches_the_cpu_path_on_drawn_programs(device: str) -> None:
    images = batch_of(32, 45, 61)
    program = P.draw_program(ALL_OPS, seed=11, epoch=3, keys=np.arange(32) + 100, view=1,
                             height=45, width=61)
    cpu = P.apply_program_reference(images.copy(), program)
    out = _on_device(images, program, _device(device))
    assert not np.array_equal(out, images)
    for index in range(32):
        assert mae(out[index], cpu[index]) <= 2, (index, program.codes[index])


@pytest.mark.native_neutral
def test_a_sample_runs_the_same_alone_or_in_its_batch() -> None:
    images = batch_of(12, 32, 40)
    program = P.draw_program(ALL_OPS, seed=2, epoch=0, keys=np.arange(12), view=0,
                             height=32, width=40)
    together = _on_device(images.copy(), program, torch.device("cpu"))
    for index in (0, 5, 11):
        alone = _on_device(images[index:index + 1].copy(), program.sample(index),
                           torch.device("cpu"))
        assert np.array_equal(alone[0], together[index])


@pytest.mark.native_neutral
def test_every_code_has_a_device_kernel() -> None:
    images = batch_of(C.CODE_COUNT - 1, 20, 24)
    codes = np.arange(1, C.CODE_COUNT, dtype=np.int32)[:, None]
    params = np.zeros((len(codes), 1, 8), np.float32)
    params[:, 0, 0] = [1.3, 0.7, 1.5, 0.2, 0, 1.1, 100, 3, 0, 0, 0, 1.8, 0, 0.3, 0.2, 5, -4, 20]
    params[C.ERASE - 1, 0, :7] = (2, 3, 5, 6, 9, 8, 7)
    program = P.PixelProgram(codes, params)
    cpu = P.apply_program_reference(images.copy(), program)
    out = _on_device(images, program, torch.device("cpu"))
    for index in range(len(codes)):
        assert not np.array_equal(out[index], images[index]), C.NAMES[index + 1]
        assert mae(out[index], cpu[index]) <= 2, C.NAMES[index + 1]


@pytest.mark.native_neutral
def test_the_input_tensor_is_left_as_it_was() -> None:
    images = torch.from_numpy(batch_of(2, 16, 16)).permute(0, 3, 1, 2).contiguous()
    before = images.clone()
    apply_program_torch(images, program_of(C.INVERT, 0.0, n=2))
    assert torch.equal(images, before)


@pytest.mark.native_neutral
@pytest.mark.parametrize("images, error, word", [
    (torch.zeros(2, 3, 8, 8, dtype=torch.float32), InvalidArgumentError, "images"),
    (torch.zeros(2, 4, 8, 8, dtype=torch.uint8), InvalidArgumentError, "images"),
    (torch.zeros(3, 3, 8, 8, dtype=torch.uint8), InvalidArgumentError, "images"),
    (np.zeros((2, 3, 8, 8), np.uint8), InvalidTypeError, "images"),
])
def test_bad_batches_are_refused_naming_images(images: object, error: type, word: str) -> None:
    with pytest.raises(error, match=word):
        apply_program_torch(images, program_of(C.INVERT, 0.0, n=2))  # type: ignore[arg-type]


@pytest.mark.native_neutral
def test_a_program_that_is_not_one_is_refused() -> None:
    with pytest.raises(InvalidTypeError, match="program"):
        apply_program_torch(torch.zeros(1, 3, 4, 4, dtype=torch.uint8), "invert")  # type: ignore
