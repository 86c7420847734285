"""CUDA checks (marker `gpu`, run by benchmarks/gpu_check.py): normalize, DALI mixed, GPU ops.

The pinned ring's race test, with its negative controls, is tests/test_gpu_race.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader.decode.augment import CenterCrop, RandomHorizontalFlip, RandomResizedCrop
from fastloader.format.open import open_dataset
from fastloader.gpu.ops import GpuNormalize, GpuRandomHorizontalFlip, GpuRandomResizedCrop, gpu_rng
from fastloader.gpu.pixel_ops import GpuColorJitter, GpuCutMix, GpuMixUp
from fastloader.loader.dali.pipeline import dali_available
from fastloader.pack.pipeline.tree import pack
from helpers import MEAN, STD
from imagegen import make_tree

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
TRAIN = [RandomResizedCrop(32), RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu")
    make_tree(root / "tree", classes=4, per_class=24, size=(60, 80))
    pack(root / "tree", root / "data.lmdb", workers=2)
    return root / "data.lmdb"


def fast_loader(path: Path, device: str, **kwargs: Any) -> Any:
    from fastloader.loader.loader import FastLoader

    return FastLoader(str(path), batch_size=8, shuffle=True, seed=7, transforms=TRAIN,
                      device=device, num_threads=2, prefetch=2, **kwargs)


def test_normalize_on_device_matches_cpu(packed: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(packed, tmp_path / "copy.lmdb")
    with fast_loader(packed, "cpu", normalize=(MEAN, STD)) as cpu_loader:
        expected = next(iter(cpu_loader))[0]
    with fast_loader(copy, "cuda", normalize=(MEAN, STD)) as gpu_loader:
        images = next(iter(gpu_loader))[0]
    assert images.dtype == torch.float32 and images.is_cuda
    torch.testing.assert_close(images.cpu(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not dali_available(), reason='DALI missing: pip install "fastloader[dali]"')
def test_dali_mixed_decode_matches_the_cpu_pipeline(packed: Path) -> None:
    from fastloader.loader.dali.loader import DaliLoader

    dataset = open_dataset(packed)
    options: dict[str, Any] = {"batch_size": 16, "shuffle": True, "seed": 3,
                               "transforms": [CenterCrop(48), RandomHorizontalFlip()]}
    on_cpu = [(i.clone(), label.clone()) for i, label in DaliLoader(dataset, device="cpu",
                                                                   **options)]
    loader = DaliLoader(dataset, device="cuda", **options)
    on_gpu = [(i.clone(), label.clone()) for i, label in loader]
    assert len(on_gpu) == len(on_cpu) == len(loader)
    for (images, labels), (ref_images, ref_labels) in zip(on_gpu, on_cpu, strict=True):
        assert images.is_cuda and images.shape == ref_images.shape
        assert torch.equal(labels.cpu(), ref_labels)
        # nvJPEG and libjpeg-turbo may round the IDCT/upsampling differently by a level or two.
        assert (images.cpu().float() - ref_images.float()).abs().mean() < 2.0
    state_loader = DaliLoader(dataset, device="cuda", **options)
    iterator = iter(state_loader)
    next(iterator)
    state = state_loader.state_dict()
    del iterator
    resumed = DaliLoader(dataset, device="cuda", **options)
    resumed.load_state_dict(state)
    rest = [i.cpu() for i, _ in resumed]
    assert all(torch.equal(a, b.cpu()) for a, (b, _) in zip(rest, on_gpu[1:], strict=True))
    for each in (loader, state_loader, resumed):
        each.close()
    dataset.close()


@pytest.mark.parametrize(
    "op",
    [GpuRandomResizedCrop(24), GpuRandomHorizontalFlip(), GpuColorJitter(0.4, 0.4, 0.4),
     GpuNormalize(MEAN, STD), GpuMixUp(0.2, 10), GpuCutMix(1.0, 10)],
    ids=lambda op: type(op).__name__,
)
def test_gpu_ops_on_cuda_match_cpu(op: Any) -> None:
    images = torch.randint(0, 256, (16, 3, 40, 48), dtype=torch.uint8)
    labels = torch.arange(16) % 10
    on_cpu = op(images, labels, gpu_rng(1, 2, 3))
    on_gpu = op(images.cuda(), labels.cuda(), gpu_rng(1, 2, 3))
    assert on_gpu[0].is_cuda and on_gpu[0].dtype == on_cpu[0].dtype
    difference = (on_gpu[0].cpu().double() - on_cpu[0].double()).abs()
    assert float(difference.max()) <= (1.0 if on_cpu[0].dtype == torch.uint8 else 1e-4)
    torch.testing.assert_close(on_gpu[1].cpu(), on_cpu[1])


def test_gpu_op_chain_runs_on_the_device_in_one_shape() -> None:
    """A typical chain on a large batch stays on the device and keeps its shape and dtype
    (its speed is measured by benchmarks/gpu_check.sh, not asserted here)."""
    ops = [GpuRandomResizedCrop(224), GpuRandomHorizontalFlip(), GpuColorJitter(0.4, 0.4, 0.4),
           GpuNormalize(MEAN, STD)]
    images = torch.randint(0, 256, (256, 3, 256, 256), dtype=torch.uint8, device="cuda")
    labels = torch.zeros(256, dtype=torch.int64, device="cuda")
    out, _ = images, labels
    rng = gpu_rng(0, 0, 0)
    for op in ops:
        out, _ = op(out, labels, rng)
    assert out.shape == (256, 3, 224, 224) and out.is_cuda and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    mean = out.float().mean(dim=(0, 2, 3)).cpu()  # normalized uniform pixels: near zero mean
    assert mean.abs().max() < 1.0
