"""The device ops and copy step on the CPU: half precision, antialiasing, layout, device choice.

These run everywhere (the ops and DeviceStep are device-agnostic); the CUDA-only checks are in
tests/test_gpu_cuda.py and tests/test_gpu_race.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fastloader.decode.augment import CenterCrop, RandomHorizontalFlip, RandomResizedCrop
from fastloader.errors import InvalidArgumentError
from fastloader.gpu.device import DeviceStep, cuda_index, resolve_memory_format
from fastloader.gpu.ops import GpuNormalize, GpuRandomResizedCrop, gpu_rng, resized_crop
from fastloader.gpu.pixel_ops import GpuColorJitter, soft_targets
from fastloader.loader.pipeline.memory import BatchRing, pinned_nbytes
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def ramp_batch(n: int = 3, height: int = 40, width: int = 500) -> torch.Tensor:
    """Integer pixels (exact in bf16 and fp16) that change along x: sampling errors show."""
    x = torch.arange(width, dtype=torch.float32)
    image = (x * 7 % 256).view(1, 1, 1, width).expand(n, 3, height, width)
    return (image + torch.arange(n).view(n, 1, 1, 1)).clamp(0, 255).round()


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("antialias", [False, True])
def test_half_precision_crops_sample_in_float32(half: torch.dtype, antialias: bool) -> None:
    """bf16 holds 499 as 500: a grid in bf16 samples up to ~2 px off at 500 px; sampling in
    float32 and casting once gives exactly the float32 result, rounded."""
    images = ramp_batch()
    boxes = np.array([[0, 440, 40, 60], [5, 0, 30, 500], [2, 251, 20, 249]])
    flips = np.array([False, True, False])
    expected = resized_crop(images, boxes, (24, 56), flips, antialias=antialias)
    got = resized_crop(images.to(half), boxes, (24, 56), flips, antialias=antialias)
    assert got.dtype == half
    assert torch.equal(got, expected.to(half))


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_half_precision_jitter_and_normalize_match_float32(half: torch.dtype) -> None:
    images = ramp_batch(width=64) / 255.0
    jitter = GpuColorJitter(0.4, 0.4, 0.4)
    expected, _ = jitter(images.to(half).float(), torch.zeros(3), gpu_rng(1, 0, 0))
    got, _ = jitter(images.to(half), torch.zeros(3), gpu_rng(1, 0, 0))
    assert got.dtype == half and torch.equal(got, expected.to(half))
    normalize = GpuNormalize(MEAN, STD, dtype=half)
    pixels = (images * 255).round().to(torch.uint8)
    reference, _ = GpuNormalize(MEAN, STD)(pixels, torch.zeros(3), gpu_rng(0, 0, 0))
    out, _ = normalize(pixels, torch.zeros(3), gpu_rng(0, 0, 0))
    assert out.dtype == half and torch.equal(out, reference.to(half))  # one rounding


def test_random_resized_crop_antialiases_like_the_decode_path() -> None:
    """Each output is torch's antialiased (Pillow-equivalent) resize of its planned box."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 60, 90), generator=g, dtype=torch.uint8)
    op = GpuRandomResizedCrop(20, scale=(0.3, 1.0))
    out, _ = op(images.float(), torch.zeros(6), gpu_rng(2, 0, 0))
    boxes, _, _ = op.plan(gpu_rng(2, 0, 0), 6, 60, 90)
    for k, (top, left, h, w) in enumerate(boxes):
        crop = images[k : k + 1, :, top : top + h, left : left + w].float()
        expected = F.interpolate(crop, size=(20, 20), mode="bilinear", antialias=True,
                                 align_corners=False)
        torch.testing.assert_close(out[k : k + 1], expected, atol=1e-3, rtol=0)


def test_strong_downscale_does_not_alias() -> None:
    """Alternate black and white columns shrunk 6.4x: the antialiased result is flat grey;
    point sampling (grid_sample, antialias=False) mixes two columns and keeps extremes."""
    stripes = torch.zeros(1, 3, 64, 256)
    stripes[..., ::2] = 255.0
    box = np.array([[0, 0, 64, 256]])
    smooth = resized_crop(stripes, box, (8, 40), antialias=True)
    aliased = resized_crop(stripes, box, (8, 40), antialias=False)
    assert float((smooth - 127.5).abs().max()) < 8.0
    assert float((aliased - 127.5).abs().max()) > 60.0
    out, _ = GpuRandomResizedCrop(40, scale=(1.0, 1.0), ratio=(4.0, 4.0))(
        stripes, torch.zeros(1), gpu_rng(0, 0, 0))
    assert float((out - 127.5).abs().max()) < 8.0  # the default antialiases


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16, torch.float16])
def test_device_step_writes_channels_last_and_half_directly(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    batch = torch.randint(0, 256, (4, 10, 12, 3), generator=g, dtype=torch.uint8)
    labels = np.arange(4, dtype=np.int64)
    normalize = None if dtype == torch.uint8 else (MEAN, STD)
    reference = DeviceStep(torch.device("cpu"), normalize, torch.float32 if normalize else None)
    expected = reference(batch, labels)[0]
    step = DeviceStep(torch.device("cpu"), normalize, dtype, torch.channels_last)
    assert step.planar is None  # channels_last converts from the ring, not the planar path
    images, out_labels, event = step(batch, labels)
    assert event is None and images.dtype == dtype
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert images.data_ptr() != batch.data_ptr()  # never the ring's memory
    assert torch.equal(images, expected.to(dtype))  # float32 math, one rounding
    assert torch.equal(out_labels, torch.arange(4))


def test_memory_format_is_checked() -> None:
    assert resolve_memory_format(None) == torch.contiguous_format
    assert resolve_memory_format(torch.channels_last) == torch.channels_last
    with pytest.raises(InvalidArgumentError, match="channels_last"):
        resolve_memory_format("NHWC")
    with pytest.raises(InvalidArgumentError, match="memory_format"):
        resolve_memory_format(torch.channels_last_3d)


def test_cuda_index_follows_local_rank() -> None:
    assert cuda_index(None, 8, current=0) == 0
    assert cuda_index(None, 8, current=3) == 3  # set_device before construction is kept
    assert cuda_index("5", 8, current=0) == 5  # torchrun rank 5: not cuda:0
    assert cuda_index("5", 1, current=0) == 0  # one visible GPU per rank
    assert cuda_index("x", 8, current=2) == 2


def test_soft_targets_on_the_host_refuse_bad_labels() -> None:
    assert torch.equal(soft_targets(torch.tensor([2, 0]), 3),
                       torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))
    with pytest.raises(InvalidArgumentError, match="must lie in"):
        soft_targets(torch.tensor([0, 3]), 3)


def test_unpinned_ring_grows_and_reports_its_bytes() -> None:
    ring = BatchRing(2, 4, 8, 8, pin=False)
    assert ring.slots == 2 and ring.nbytes == 2 * 4 * 8 * 8 * 3
    ring.grow(3)
    assert ring.slots == 3 and len(ring.buffers) == 3
    assert pinned_nbytes(1) == pinned_nbytes(4096) == 4096 and pinned_nbytes(4097) == 8192


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layout")
    make_tree(root / "tree", classes=2, per_class=6, size=(40, 52))
    pack(root / "tree", root / "data.lmdb", workers=1)
    return root / "data.lmdb"


def loader_batches(path: Any, **kwargs: Any) -> list[torch.Tensor]:
    from fastloader.loader.loader import FastLoader

    options: dict[str, Any] = {"batch_size": 4, "seed": 1, "shuffle": True, "device": "cpu",
                               "num_threads": 1, "prefetch": 1,
                               "transforms": [RandomResizedCrop(16), RandomHorizontalFlip()]}
    with FastLoader(path, **{**options, **kwargs}) as loader:
        return [images.clone(memory_format=torch.preserve_format) for images, _ in loader]


@pytest.mark.parametrize("kwargs", [{}, {"normalize": (MEAN, STD)},
                                    {"normalize": (MEAN, STD), "dtype": torch.bfloat16},
                                    {"gpu_transforms": [GpuColorJitter(0.2)],
                                     "normalize": (MEAN, STD)}],
                         ids=["uint8", "float32", "bf16", "ops"])
def test_loader_channels_last_output_equals_the_default_layout(packed: Path,
                                                              kwargs: dict[str, Any]) -> None:
    from fastloader.format.open import open_dataset

    with open_dataset(packed) as dataset:
        plain = loader_batches(dataset, **kwargs)
        nhwc = loader_batches(dataset, memory_format=torch.channels_last, **kwargs)
    assert len(plain) == len(nhwc) == 3
    for a, b in zip(plain, nhwc, strict=True):
        assert b.is_contiguous(memory_format=torch.channels_last) and b.dtype == a.dtype
        # The CPU default decodes planar with the C++ normalize; channels_last converts in
        # torch from the same pixels: equal up to float32 rounding.
        torch.testing.assert_close(b.float(), a.float(), atol=1e-5 if a.dtype != torch.bfloat16
                                   else 1e-2, rtol=1e-2 if a.dtype == torch.bfloat16 else 0)


def test_dali_channels_last_output(packed: Path) -> None:
    from fastloader.format.open import open_dataset
    from fastloader.loader.dali.pipeline import dali_available

    if not dali_available():
        pytest.skip('NVIDIA DALI is not importable here: pip install "fastloader[dali]"')
    with open_dataset(packed) as dataset:
        for kwargs in ({}, {"normalize": (MEAN, STD)}):
            plain = loader_batches(dataset, backend="dali", prefetch=2,
                                   transforms=[CenterCrop(16)], **kwargs)
            nhwc = loader_batches(dataset, backend="dali", prefetch=2, transforms=[CenterCrop(16)],
                                  memory_format=torch.channels_last, **kwargs)
            for a, b in zip(plain, nhwc, strict=True):
                assert b.is_contiguous(memory_format=torch.channels_last)
                torch.testing.assert_close(b, a, atol=1e-5, rtol=0)


def test_doctor_names_the_copy_row_by_what_it_measures(packed: Path) -> None:
    """On CUDA the copy row is GPU time from events, not the host's enqueue time."""
    import dataclasses

    from fastloader.doctor.doctor import format_report, run_doctor

    report = run_doctor(str(packed), seconds=0.3, batch_size=2, image_size=16, device="cpu",
                        num_threads=1, prefetch=1)
    assert "hand-over (CPU)" in format_report(report)
    on_cuda = dataclasses.replace(report, stats={**report.stats, "device": "cuda"})
    assert "H2D copy+convert (GPU time)" in format_report(on_cuda)
