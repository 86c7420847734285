"""CUDA checks of the device path (marker `gpu`; skipped, saying why, without a CUDA device).

GPU vs CPU parity (uint8, float32, bf16, channels_last), the device ops under sync debug mode,
the pinned ring's real bytes, the device fixed at construction, and the copy time from events.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop
from fastloader.gpu.ops import GpuNormalize, GpuRandomHorizontalFlip, GpuRandomResizedCrop, gpu_rng
from fastloader.gpu.pixel_ops import GpuColorJitter, GpuCutMix, GpuMixUp
from fastloader.loader.pipeline.memory import pinned_nbytes
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TRAIN = [RandomResizedCrop(48), RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cuda")
    make_tree(root / "tree", classes=4, per_class=16, size=(64, 80))
    pack(root / "tree", root / "data.lmdb", workers=2)
    return root / "data.lmdb"


@pytest.fixture
def fresh(packed: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of the dataset: one LMDB environment per loader in this process."""
    yield shutil.copytree(packed, tmp_path / "copy.lmdb")


def batches(path: Path, device: str, **kwargs: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from fastloader.loader.loader import FastLoader

    options: dict[str, Any] = {"batch_size": 16, "shuffle": True, "seed": 4, "transforms": TRAIN,
                               "num_threads": 2, "prefetch": 2}
    with FastLoader(str(path), device=device, **{**options, **kwargs}) as loader:
        return [(i.clone(memory_format=torch.preserve_format), labels.clone())
                for i, labels in loader]


@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", [None, torch.channels_last])
def test_cuda_output_matches_the_cpu_loader(packed: Path, fresh: Path, dtype: Any,
                                            layout: Any) -> None:
    normalize = None if dtype is None else (MEAN, STD)
    want = batches(packed, "cpu", normalize=normalize)  # uint8 or float32
    got = batches(fresh, "cuda", normalize=normalize, dtype=dtype, memory_format=layout)
    assert len(got) == len(want)
    for (images, labels), (ref, ref_labels) in zip(got, want, strict=True):
        assert images.is_cuda and labels.is_cuda and images.dtype == (dtype or torch.uint8)
        if layout is not None:
            assert images.is_contiguous(memory_format=layout)
        assert torch.equal(labels.cpu(), ref_labels)
        if dtype is None:
            assert torch.equal(images.cpu(), ref)
        elif dtype == torch.float32:
            torch.testing.assert_close(images.cpu(), ref, atol=1e-5, rtol=1e-5)
        else:  # one rounding of the float32 value: within half a bf16 step (2^-8 relative)
            torch.testing.assert_close(images.cpu().float(), ref, atol=1e-6, rtol=2.0**-8)


def test_device_ops_chain_never_syncs() -> None:
    """The ops chain (geometry, flip, jitter, normalize, MixUp, CutMix) under sync debug
    mode "error": a blocking device-to-host read (e.g. int(labels.max())) raises."""
    ops = [GpuRandomResizedCrop(32), GpuRandomHorizontalFlip(), GpuColorJitter(0.4, 0.4, 0.4),
           GpuNormalize(MEAN, STD, dtype=torch.bfloat16), GpuMixUp(0.2, 10), GpuCutMix(1.0, 10)]
    images = torch.randint(0, 256, (8, 3, 48, 64), dtype=torch.uint8, device="cuda")
    labels = torch.arange(8, device="cuda") % 10
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for b in range(3):
            out, targets = images, labels
            rng = gpu_rng(0, 0, b)
            for op in ops:
                out, targets = op(out, targets, rng)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert out.shape == (8, 3, 32, 32) and out.dtype == torch.bfloat16
    assert targets.shape == (8, 10)


def test_loader_iteration_never_syncs_the_consumer(fresh: Path) -> None:
    from fastloader.loader.loader import FastLoader

    with FastLoader(str(fresh), batch_size=16, transforms=TRAIN, normalize=(MEAN, STD),
                    device="cuda", gpu_transforms=[GpuColorJitter(0.2)], prefetch=2) as loader:
        iterator = iter(loader)
        next(iterator)  # construction and the first batch may set things up
        torch.cuda.set_sync_debug_mode("error")
        try:
            count = sum(1 for _ in iterator)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert count == len(loader) - 1


def test_pinned_ring_holds_exactly_what_it_reports(fresh: Path) -> None:
    from fastloader.loader.loader import FastLoader

    before = torch.cuda.host_memory_stats().get("allocated_bytes.current", 0)
    with FastLoader(str(fresh), batch_size=16, transforms=TRAIN, device="cuda",
                    prefetch=3) as loader:
        next(iter(loader))
        ring = loader._ring
        assert ring is not None and ring.pinned and ring.slots == 4
        assert all(buffer.is_pinned() for buffer in ring.buffers)
        slot = pinned_nbytes(16 * 48 * 48 * 3)
        assert loader.stats().ring_bytes == ring.nbytes == 4 * slot
        # Not torch's caching host allocator (power-of-two blocks kept after close).
        assert torch.cuda.host_memory_stats().get("allocated_bytes.current", 0) == before


def test_auto_prefetch_pins_its_whole_budget_before_training(fresh: Path) -> None:
    from fastloader.loader.loader import FastLoader

    slot = pinned_nbytes(16 * 48 * 48 * 3)
    with FastLoader(str(fresh), batch_size=16, transforms=TRAIN, device="cuda",
                    prefetch="auto", memory_budget=6 * slot) as loader:
        iterator = iter(loader)
        next(iterator)
        ring = loader._ring
        assert ring is not None and len(ring.buffers) == 6  # capacity: max_prefetch + 1
        allocated = ring.nbytes
        for _ in iterator:
            pass
        assert ring.nbytes == allocated == 6 * slot  # nothing pinned once training ran


def test_the_device_is_fixed_at_construction(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastloader.loader.loader import FastLoader

    count = torch.cuda.device_count()
    monkeypatch.setenv("LOCAL_RANK", str(count - 1))
    with FastLoader(str(fresh), batch_size=16, transforms=TRAIN, device="cuda") as loader:
        assert loader.device == torch.device("cuda", count - 1)
        previous = torch.cuda.current_device()
        torch.cuda.set_device(0)  # a DDP script's set_device after construction
        try:
            images, labels = next(iter(loader))
        finally:
            torch.cuda.set_device(previous)
        assert images.device == labels.device == torch.device("cuda", count - 1)


def gpu_sleep_seconds(cycles: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def test_copy_time_comes_from_cuda_events(fresh: Path) -> None:
    """copy_s is device time: a GPU sleep inside the copy (the side stream) shows in it in
    full, where timing the host's enqueue would see almost none of it."""
    from fastloader.gpu.device import RACE_SWITCHES
    from fastloader.loader.loader import FastLoader

    cycles = 20_000_000
    sleep_s = gpu_sleep_seconds(cycles)
    RACE_SWITCHES.side_sleep_cycles = cycles
    try:
        with FastLoader(str(fresh), batch_size=16, transforms=TRAIN, normalize=(MEAN, STD),
                        device="cuda", prefetch=2) as loader:
            count = sum(1 for _ in loader)
            torch.cuda.synchronize()
            assert loader._step.timer is not None
            copy_s = loader.stats().as_dict()["copy_s"] + loader._step.timer.flush()
    finally:
        RACE_SWITCHES.side_sleep_cycles = 0
    assert count == 4 and sleep_s > 0.001
    assert copy_s >= 0.9 * count * sleep_s


def test_a_cuda_graph_captures_while_the_producer_runs(fresh: Path) -> None:
    """The documented mode: capture_error_mode="thread_local" lets this thread capture while
    the producer thread waits on CUDA events (and, pinned ring allocated up front, nothing
    registers host memory meanwhile)."""
    from fastloader.loader.loader import FastLoader

    with FastLoader(str(fresh), batch_size=16, transforms=TRAIN, normalize=(MEAN, STD),
                    device="cuda", prefetch="auto", num_threads=2) as loader:
        iterator = iter(loader)
        images, _ = next(iterator)
        static = torch.zeros_like(images)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            static.mul_(2.0).add_(1.0)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            static.mul_(2.0).add_(1.0)
        total = 0
        for images, _ in iterator:
            static.copy_(images)
            graph.replay()
            total += 1
        torch.cuda.synchronize()
    assert total == len(loader) - 1
    torch.testing.assert_close(static, images * 2.0 + 1.0)
