"""Planar (NCHW) output fused into the batch decode, and FastLoader's CPU path that uses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fastloader.decode.decode import BatchDecoder
from fastloader.errors import InvalidArgumentError
from fastloader.gpu.device import DeviceStep
from fastloader.gpu.planar import TensorPool
from fastloader.loader.loader import FastLoader
from helpers import MEAN, STD, TRAIN, collect, damaged, decode_planar

pytestmark = pytest.mark.wheel


def step_reference(nhwc: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The consumer-side conversion FastLoader used before: DeviceStep on a uint8 NHWC batch."""
    step = DeviceStep(torch.device("cpu"), (MEAN, STD), dtype)
    return step(torch.from_numpy(nhwc.copy()), np.zeros(len(nhwc), np.int64))[0]


def test_planar_float_equals_the_device_step_within_rounding():
    out, planar, _ = decode_planar()
    want = step_reference(out)
    torch.testing.assert_close(torch.from_numpy(planar), want, rtol=1e-5, atol=1e-5)


def test_planar_float_is_a_float32_multiply_then_add():
    out, planar, spec = decode_planar()
    want = out.transpose(0, 3, 1, 2) * spec.scale[:, None, None]
    want += spec.shift[:, None, None]
    assert want.dtype == np.float32
    np.testing.assert_array_equal(planar, want)


def test_planar_uint8_is_the_layout_change():
    out, planar, _ = decode_planar(dtype=np.uint8)
    np.testing.assert_array_equal(planar, out.transpose(0, 3, 1, 2))


def test_planar_is_identical_on_one_or_three_threads():
    np.testing.assert_array_equal(decode_planar(1)[1], decode_planar(3)[1])


def test_failed_samples_are_the_conversion_of_zeros():
    records = [b"\xff\xd8\xff\xdbbroken", b"nothing at all"]
    out = np.full((2, 8, 8, 3), 9, np.uint8)
    planar = np.full((2, 3, 8, 8), 9, np.float32)
    errors = BatchDecoder().decode_into(records, np.zeros((2, 4)), [False, False], out,
                                        planar=planar, scale=(2, 2, 2), shift=(-1, 0, 1))
    assert all(isinstance(e, str) for e in errors)
    np.testing.assert_array_equal(planar[:, :, 0, 0], [[-1, 0, 1], [-1, 0, 1]])
    assert (planar == planar[:, :, :1, :1]).all()


@pytest.mark.parametrize(
    ("planar", "kwargs"),
    [
        (np.empty((2, 3, 8, 9), np.float32), {}),  # wrong width
        (np.empty((2, 8, 8, 3), np.float32), {}),  # NHWC, not NCHW
        (np.empty((2, 3, 8, 8), np.float64), {}),
        (np.empty((2, 3, 8, 8), np.uint8), {"scale": (1, 1, 1)}),
        (np.empty((2, 3, 8, 8), np.float32), {"scale": (1, 1)}),
        (None, {"shift": (0, 0, 0)}),
    ],
)
def test_bad_planar_arguments_are_refused(planar, kwargs):
    out = np.empty((2, 8, 8, 3), np.uint8)
    with pytest.raises(InvalidArgumentError):
        BatchDecoder().decode_into([b"", b""], np.zeros((2, 4)), [False, False], out,
                                   planar=planar, **kwargs)


def test_planar_may_not_overlap_out():
    out = np.empty((2, 3, 8, 8), np.uint8).reshape(2, 8, 8, 3)
    with pytest.raises(InvalidArgumentError, match="overlap"):
        BatchDecoder().decode_into([b"", b""], np.zeros((2, 4)), [False, False], out,
                                   planar=out.reshape(2, 3, 8, 8))


# -- FastLoader on the CPU -----------------------------------------------------------------


def batches(path, **options) -> list[tuple[torch.Tensor, torch.Tensor]]:
    with FastLoader(path, batch_size=5, shuffle=True, seed=3, transforms=TRAIN, device="cpu",
                    **options) as loader:
        return collect(loader)


@pytest.mark.parametrize("dtype", [None, torch.float16, torch.bfloat16, torch.float64])
def test_loader_normalize_equals_the_consumer_side_conversion(dataset_path: Path, dtype) -> None:
    pixels = batches(dataset_path, num_threads=2)
    normalized = batches(dataset_path, num_threads=1, normalize=(MEAN, STD), dtype=dtype)
    assert len(pixels) == len(normalized) == 5
    for (raw, raw_labels), (images, labels) in zip(pixels, normalized, strict=True):
        assert raw.dtype == torch.uint8 and images.dtype == (dtype or torch.float32)
        want = step_reference(raw.permute(0, 2, 3, 1).numpy(), dtype or torch.float32)
        torch.testing.assert_close(images, want, rtol=1e-5, atol=1e-5)
        assert torch.equal(labels, raw_labels) and labels.dtype == torch.int64


def test_loader_batches_never_share_memory(dataset_path: Path) -> None:
    with FastLoader(dataset_path, batch_size=4, transforms=TRAIN, device="cpu",
                    normalize=(MEAN, STD), prefetch=1, num_threads=1) as loader:
        seen = [images for images, _ in loader]
    pointers = {images.untyped_storage().data_ptr() for images in seen}
    assert len(pointers) == len(seen)
    assert all(images.is_contiguous() and images.shape[1] == 3 for images in seen)


def test_loader_skip_converts_the_replacement(dataset_path: Path) -> None:
    runs = []
    for normalize in (None, (MEAN, STD)):
        dataset = damaged(dataset_path, "garbage")
        with FastLoader(dataset, batch_size=4, transforms=TRAIN, on_error="skip",
                        normalize=normalize, device="cpu", num_threads=2) as loader:
            runs.append([images.clone() for images, _ in loader])
            assert loader.stats().skipped == 1
        dataset.close()
    for raw, images in zip(*runs, strict=True):
        want = step_reference(raw.permute(0, 2, 3, 1).numpy())
        torch.testing.assert_close(images, want, rtol=1e-5, atol=1e-5)


def test_pool_recycles_a_buffer_only_when_nothing_references_it() -> None:
    pool = TensorPool(keep=2)
    first = pool.tensor((2, 3, 4, 4), torch.float32)
    pointer = first.data_ptr()
    del first
    assert pool.free_buffers == 1
    second = pool.tensor((2, 3, 4, 4), torch.float32)
    assert second.data_ptr() == pointer and second.shape == (2, 3, 4, 4) and second.is_contiguous()
    view, held = second[1], second.numpy()
    del second
    other = pool.tensor((2, 3, 4, 4), torch.float32)
    assert other.data_ptr() != pointer and pool.free_buffers == 0
    del view
    assert pool.free_buffers == 0  # the numpy array still holds it
    del held
    assert pool.free_buffers == 1
    assert pool.tensor((1, 3, 4, 4), torch.uint8).data_ptr() == pointer  # a smaller batch fits
    assert pool.tensor((3, 3, 4, 4), torch.float32).data_ptr() != other.data_ptr()


def test_pool_keeps_at_most_keep_free_buffers() -> None:
    pool = TensorPool(keep=2)
    tensors = [pool.tensor((4, 4), torch.float32) for _ in range(5)]
    del tensors
    assert pool.free_buffers == 2
    pool.clear()
    assert pool.free_buffers == 0
    pool.reserve(3)
    pool.reserve(1)  # never shrinks
    assert pool.keep == 3


def test_loader_never_overwrites_batches_still_in_use(dataset_path: Path) -> None:
    with FastLoader(dataset_path, batch_size=3, shuffle=True, transforms=TRAIN, device="cpu",
                    normalize=(MEAN, STD), prefetch=1, num_threads=2) as loader:
        iterator = iter(loader)
        kept, _ = next(iterator)
        second, _ = next(iterator)
        view = second[1:]
        del second
        copies = (kept.clone(), view.clone())
        rest = sum(1 for _ in iterator)
    assert rest == len(loader) - 2
    assert torch.equal(kept, copies[0]) and torch.equal(view, copies[1])
