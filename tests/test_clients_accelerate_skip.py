"""Accelerate's real skip_first_batches on packed loaders, through their DataLoader attributes.

skip_first_batches rebuilds a torch DataLoader from `loader.dataset`, `batch_size`,
`drop_last`, `collate_fn`, ...: a packed loader's `dataset` is its passes as samples and its
`collate_fn` gives a batch's samples back as that batch, so the rebuilt loader yields the
loader's own batches (fused decode, no copy) from batch n on.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop
from fastloader.errors import FastloaderError
from fastloader.format.dataset import PackedDataset
from fastloader.loader.dali.pipeline import dali_available
from fastloader.loader.factory.pass_dataset import PassDataset
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

accelerate = pytest.importorskip("accelerate", reason="accelerate is a test dependency")

TRAIN = [RandomResizedCrop(16), RandomHorizontalFlip()]
OPTIONS: dict[str, Any] = {"batch_size": 3, "shuffle": True, "transforms": TRAIN,
                           "num_threads": 1, "device": "cpu", "seed": 5}


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("skip")
    make_tree(root / "tree", classes=2, per_class=7, size=(24, 28))  # 14 samples
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


@pytest.fixture(scope="module")
def accelerator() -> Any:
    return accelerate.Accelerator(cpu=True)


def same(a: Any, b: Any) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True))


def one_epoch(loader: Any, epoch: int) -> list[Any]:
    loader.set_epoch(epoch)
    return [(images.clone(), labels.clone()) for images, labels in loader]


@pytest.mark.parametrize("drop_last", [False, True])
def test_skip_first_batches_yields_the_tail_of_the_pass(
        accelerator: Any, packed: Path, drop_last: bool) -> None:
    with FastLoader(packed, drop_last=drop_last, **OPTIONS) as loader:
        everything = one_epoch(loader, 2)
        assert len(everything) == (4 if drop_last else 5)
        for n in (0, 2, len(everything)):
            loader.set_epoch(2)
            skipped = accelerator.skip_first_batches(loader, n)
            assert len(skipped) == len(everything) - n
            batches = list(skipped)
            assert all(isinstance(b, tuple) for b in batches)  # the loader's own, not re-collated
            assert same(batches, everything[n:])
        assert loader.sampler.next_epoch() == 3  # the skipped pass was a pass over epoch 2
        # Never pinned host memory (CUDA batches come out on the device): a rebuilt DataLoader
        # must not try to pin them, on any device.
        assert type(loader).pin_memory is False


def test_a_checkpoint_inside_a_skipped_pass_resumes_exactly(
        accelerator: Any, packed: Path) -> None:
    with FastLoader(packed, **OPTIONS) as loader:
        everything = one_epoch(loader, 1)
        loader.set_epoch(1)
        it = iter(accelerator.skip_first_batches(loader, 2))
        next(it)
        state = loader.state_dict()
        assert (state["epoch"], state["batches_done"]) == (1, 3)  # 2 skipped + 1 taken
    with FastLoader(packed, **OPTIONS) as again:
        again.load_state_dict(state)
        assert same([(i, lab) for i, lab in again], everything[3:])


def test_a_dataloader_built_from_the_attributes_is_the_loader(packed: Path) -> None:
    with FastLoader(packed, **OPTIONS) as loader:
        everything = one_epoch(loader, 0)
        loader.set_epoch(0)
        rebuilt = torch.utils.data.DataLoader(
            loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last,
            collate_fn=loader.collate_fn, num_workers=loader.num_workers)
        assert len(rebuilt) == len(loader) == 5
        assert same(list(rebuilt), everything)
        # Samples are rows of the batches; grouped otherwise they are collated (stacked).
        loader.set_epoch(0)
        pairs = torch.utils.data.DataLoader(loader.dataset, batch_size=2,
                                            collate_fn=loader.collate_fn)
        first = next(iter(pairs))
        assert torch.equal(first[0], everything[0][0][:2])
        assert torch.equal(first[1], everything[0][1][:2])


def test_the_dataset_view_refuses_dataloader_workers(packed: Path) -> None:
    with FastLoader(packed, **OPTIONS) as loader:
        workers = torch.utils.data.DataLoader(loader.dataset, batch_size=3, num_workers=1,
                                              collate_fn=loader.collate_fn,
                                              multiprocessing_context="fork")
        with pytest.raises(Exception, match="num_workers=0"):
            next(iter(workers))
        with pytest.raises(FastloaderError, match="cannot be pickled"):
            pickle.dumps(loader.dataset)


def test_the_dataset_view_reads_as_the_packed_dataset(packed: Path) -> None:
    with FastLoader(packed, **OPTIONS) as loader:
        view = loader.dataset
        assert isinstance(view, PassDataset) and isinstance(view, torch.utils.data.IterableDataset)
        assert isinstance(view.packed, PackedDataset)
        assert len(view) == 14 and view.classes == view.packed.classes
        assert view.shapes is view.packed.shapes
        image, label = next(iter(view))  # a sample: one image and its label
        assert image.shape == (3, 16, 16) and label.dtype == torch.int64
        with FastLoader(view, **OPTIONS) as again:  # stands for its packed dataset
            assert type(again) is type(loader) and again.dataset.packed is view.packed
    with FastLoader(packed, rank=1, world_size=2, **OPTIONS) as half:
        assert len(half.dataset) == 7  # this rank's samples of a pass, as a DataLoader counts


@pytest.mark.skipif(not dali_available(), reason="NVIDIA DALI is not importable here")
def test_skip_first_batches_on_the_dali_loader(accelerator: Any, packed: Path) -> None:
    with FastLoader(packed, backend="dali", **OPTIONS) as loader:
        everything = one_epoch(loader, 0)
        loader.set_epoch(0)
        assert same(list(accelerator.skip_first_batches(loader, 3)), everything[3:])


def test_accelerate_checkpoints_the_loader_and_resumes_it_exactly(
        packed: Path, tmp_path: Path) -> None:
    """register_for_checkpointing: save_state/load_state carry the loader's state_dict."""
    with FastLoader(packed, **OPTIONS) as loader:
        everything = one_epoch(loader, 1)
        saver = accelerate.Accelerator(cpu=True)
        saver.register_for_checkpointing(loader)
        loader.set_epoch(1)
        it = iter(loader)
        next(it), next(it)
        saver.save_state(str(tmp_path / "ckpt"))
    with FastLoader(packed, **OPTIONS) as again:
        restorer = accelerate.Accelerator(cpu=True)
        restorer.register_for_checkpointing(again)
        restorer.load_state(str(tmp_path / "ckpt"))
        assert same([(i, lab) for i, lab in again], everything[2:])
