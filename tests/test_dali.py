"""DaliLoader on DALI's CPU operators: FastLoader's semantics (order, sharding, resume, dtypes)."""

from __future__ import annotations

import builtins
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fastloader.decode.augment import (
    CenterCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    plan,
)
from fastloader.decode.decode import decode
from fastloader.errors import DecodeError, InvalidArgumentError, OptionalDependencyError
from fastloader.format.dataset import PackedDataset
from fastloader.format.open import open_dataset
from fastloader.gpu.ops import GpuRandomHorizontalFlip
from fastloader.gpu.pixel_ops import GpuColorJitter
from fastloader.loader.dali.pipeline import dali_available
from fastloader.loader.order.sampler import epoch_indices
from fastloader.pack.pipeline.tree import pack
from helpers import MEAN, STD, collect
from imagegen import make_tree

needs_dali = pytest.mark.skipif(
    not dali_available(),
    reason='NVIDIA DALI is not importable here: pip install "fastloader[dali]" to run these',
)
TRAIN = [RandomResizedCrop(24), RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dali")
    make_tree(root / "tree", classes=3, per_class=7, size=(40, 52))
    pack(root / "tree", root / "data.lmdb", workers=1)
    return root / "data.lmdb"


@pytest.fixture(scope="module")
def dataset(packed: Path) -> Any:
    # One open dataset shared by the loaders of a test: the LMDB reader refuses to open the
    # same shard twice in one process.
    opened = open_dataset(packed)
    yield opened
    opened.close()


def dali_loader(path: Path | PackedDataset, **kwargs: Any) -> Any:
    from fastloader.loader.dali.loader import DaliLoader

    options: dict[str, Any] = {"batch_size": 4, "device": "cpu", "num_threads": 1}
    return DaliLoader(path, **{**options, **kwargs})


@needs_dali
def test_shapes_dtypes_and_labels_follow_the_sampler(packed: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(packed, tmp_path / "copy.lmdb")  # opened by path, closed by `with`
    with dali_loader(copy, shuffle=True, seed=3, transforms=TRAIN) as loader:
        batches = collect(loader)
        dataset = loader.dataset
        assert len(batches) == len(loader) == 6  # 21 samples, batch 4, last batch of 1
        order = epoch_indices(21, 0, seed=3, shuffle=True)
        labels = torch.cat([labels for _, labels in batches])
        assert torch.equal(labels, torch.from_numpy(dataset.labels[order]))
        assert batches[0][0].shape == (4, 3, 24, 24) and batches[-1][0].shape == (1, 3, 24, 24)
        assert batches[0][0].dtype == torch.uint8 and labels.dtype == torch.int64
        assert loader.sampler.epoch == 1  # a full pass advances the epoch, like FastLoader
        stats = loader.stats()
        assert stats.images == 21 and stats.batches == 6 and stats.backend == "dali-cpu"
        assert stats.read_s > 0 and stats.active_s >= stats.wait_s > 0


@needs_dali
def test_pixels_are_the_planned_crop_of_the_decoded_image(dataset: Any) -> None:
    with dali_loader(dataset, transforms=[Resize(20), CenterCrop(16)], batch_size=21) as loader:
        (images, _), = collect(loader)
        crops, _, size = plan(loader.transforms, dataset.shapes, np.random.default_rng(0))
        assert size == (16, 16)
        for i in (0, 10, 20):
            top, left, h, w = crops[i]
            region = torch.from_numpy(decode(dataset.record(i))[top : top + h, left : left + w])
            expected = torch.nn.functional.interpolate(
                region.permute(2, 0, 1)[None].float(), size=(16, 16), mode="bilinear",
                antialias=True, align_corners=False)[0]
            # DALI's and torch's antialiased resamplers differ slightly at the edges.
            assert (images[i].float() - expected).abs().mean() < 4.0


@needs_dali
def test_flip_follows_the_plan(dataset: Any) -> None:
    kept = collect(dali_loader(dataset, transforms=[CenterCrop(32)], batch_size=21))[0][0]
    flipped = collect(dali_loader(dataset, transforms=[CenterCrop(32), RandomHorizontalFlip(1.0)],
                                  batch_size=21))[0][0]
    assert torch.equal(flipped, kept.flip(-1))


@needs_dali
def test_normalize_and_dtype(dataset: Any) -> None:
    plain = collect(dali_loader(dataset, transforms=[CenterCrop(32)]))[0][0]
    normal = collect(dali_loader(dataset, transforms=[CenterCrop(32)], normalize=(MEAN, STD)))
    half = collect(dali_loader(dataset, transforms=[CenterCrop(32)], normalize=(MEAN, STD),
                               dtype=torch.float16))[0][0]
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    assert normal[0][0].dtype == torch.float32 and half.dtype == torch.float16
    torch.testing.assert_close(normal[0][0], (plain.float() / 255 - mean) / std,
                               atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(half.float(), normal[0][0], atol=2e-2, rtol=1e-2)


@needs_dali
def test_two_ranks_are_disjoint_equal_and_cover(dataset: Any) -> None:
    seen = []
    for rank in (0, 1):
        loader = dali_loader(dataset, shuffle=True, seed=1, transforms=TRAIN, rank=rank,
                             world_size=2)
        labels = torch.cat([labels for _, labels in collect(loader)])
        expected = dataset.labels[epoch_indices(21, 0, 1, rank, 2, True)]
        assert torch.equal(labels, torch.from_numpy(expected))
        assert len(loader) == 3 and len(labels) == 11  # 21 padded to 22, like DistributedSampler
        seen.append(set(loader.sampler.indices(0).tolist()))
        loader.close()
    assert seen[0] | seen[1] == set(range(21)) and len(seen[0] & seen[1]) == 1  # the pad


@needs_dali
def test_deterministic_and_resume_mid_epoch_is_exact(dataset: Any) -> None:
    options: dict[str, Any] = {"shuffle": True, "seed": 5, "transforms": TRAIN,
                               "gpu_transforms": [GpuRandomHorizontalFlip()]}
    full = dali_loader(dataset, **options)
    full.set_epoch(2)
    reference = collect(full)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(reference, collect(
        _at_epoch(dali_loader(dataset, **options), 2)), strict=True))
    first = _at_epoch(dali_loader(dataset, **options), 2)
    iterator = iter(first)
    for _ in range(2):
        next(iterator)
    state = first.state_dict()
    assert state["epoch"] == 2 and state["batches_done"] == 2
    del iterator  # breaking out mid-epoch drains DALI's prefetched batches
    resumed = dali_loader(dataset, **options)
    resumed.load_state_dict(state)
    rest = collect(resumed)
    assert len(rest) == len(reference) - 2
    for (images, labels), (ref_images, ref_labels) in zip(rest, reference[2:], strict=True):
        assert torch.equal(images, ref_images) and torch.equal(labels, ref_labels)
    # The interrupted loader goes on cleanly: a cut pass moves iter() to the next epoch (as
    # DataLoader reshuffles), and set_epoch() reads the same epoch again.
    first.set_epoch(2)
    again = collect(first)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(again, reference, strict=True))


def _at_epoch(loader: Any, epoch: int) -> Any:
    loader.set_epoch(epoch)
    return loader


@needs_dali
def test_epochs_differ_and_drop_last(dataset: Any) -> None:
    loader = dali_loader(dataset, shuffle=True, transforms=TRAIN, drop_last=True)
    first = torch.cat([labels for _, labels in collect(loader)])
    second = torch.cat([labels for _, labels in collect(loader)])
    assert len(loader) == 5 and len(first) == len(second) == 20
    assert not torch.equal(first, second)


@needs_dali
def test_uneven_sizes_without_a_crop_are_refused(dataset: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="different sizes"):
        dali_loader(dataset)
    loader = dali_loader(dataset, transforms=[Resize((20, 20))])
    assert collect(loader)[0][0].shape == (4, 3, 20, 20)
    loader.close()
    assert len(dataset.record(0)) > 0  # a dataset passed in stays open after close()


def test_missing_dali_names_the_install_command(packed: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_dali(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("nvidia.dali") or name == "nvidia":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dali)
    from fastloader.loader.dali.loader import DaliLoader

    with pytest.raises(OptionalDependencyError, match=r'pip install "fastloader\[dali\]"'):
        DaliLoader(packed, batch_size=2, device="cpu")
    assert not dali_available()


@needs_dali
def test_undecodable_record_is_named_and_the_loader_recovers(packed: Path,
                                                             tmp_path: Path) -> None:
    copy = Path(shutil.copytree(packed, tmp_path / "bad.lmdb"))
    with open_dataset(packed) as original:
        victim = bytes(original.record(6))
        where = original.describe(6)
    shard = next(copy.glob("*.mdb"))
    blob = shard.read_bytes()
    start = blob.index(victim)
    broken = b"\x00" * 64 + victim[64:]  # no SOI marker or headers: no decoder takes it
    shard.write_bytes(blob[:start] + broken + blob[start + len(victim):])
    with dali_loader(copy, transforms=[CenterCrop(16)]) as loader:
        with pytest.raises(DecodeError, match="failed to decode in DALI") as caught:
            collect(loader)
        assert where.split(" of ")[0] in str(caught.value)  # record 6, its shard and source
        assert loader.state_dict()["batches_done"] == 0
        with pytest.raises(DecodeError):  # a rebuilt pipeline, not a hang or a stale one
            collect(loader)
        loader.set_epoch(0)
        first = next(iter(loader))  # batch 0 holds only good records
        assert first[0].shape == (4, 3, 16, 16)


@needs_dali
def test_full_decode_then_slice_gives_the_roi_decode_pixels(dataset: Any) -> None:
    options: dict[str, Any] = {"shuffle": True, "transforms": TRAIN, "batch_size": 21}
    roi = collect(dali_loader(dataset, **options))[0]
    whole = collect(dali_loader(dataset, roi_decode=False, **options))[0]
    assert torch.equal(roi[1], whole[1])
    assert torch.equal(roi[0], whole[0])  # libjpeg-turbo's ROI decode is exact on the CPU


@needs_dali
def test_gpu_transforms_see_pixels_and_normalize_comes_last(dataset: Any) -> None:
    options: dict[str, Any] = {"transforms": [CenterCrop(32)], "batch_size": 21}
    plain = collect(dali_loader(dataset, **options))[0][0]
    brighter = GpuColorJitter(brightness=(1.5, 1.5))
    out = collect(dali_loader(dataset, normalize=(MEAN, STD), gpu_transforms=[brighter],
                              **options))[0][0]
    pixels = (plain.float() * 1.5).clamp(0, 255).round()
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, (pixels / 255 - mean) / std, atol=1e-4, rtol=1e-4)


def _shut_down_the_parents_pipeline(loader: Any) -> None:
    # What garbage collection does when it reaches a pipeline object copied by the fork.
    loader._pipe.__del__()


@needs_dali
def test_a_forked_child_never_waits_for_the_parents_dali_threads(dataset: PackedDataset) -> None:
    import multiprocessing

    loader = dali_loader(dataset, transforms=TRAIN)
    next(iter(loader))
    child = multiprocessing.get_context("fork").Process(
        target=_shut_down_the_parents_pipeline, args=(loader,))
    child.start()
    child.join(timeout=30)
    hung = child.is_alive()
    if hung:
        child.kill()
    loader.close()
    assert not hung and child.exitcode == 0
