"""FastLoader over a packed dataset: determinism, epochs, sampler agreement, resume, output."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastloader.decode.augment import CenterCrop, Resize
from fastloader.errors import InvalidArgumentError, InvalidTypeError
from fastloader.format.open import open_dataset
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from helpers import MEAN, STD, TRAIN, collect, same_batches
from imagegen import encode, photo_like


def test_same_seed_same_batches_on_1_or_3_threads(dataset_path: Path) -> None:
    runs = []
    for threads in (1, 3, 1):
        with FastLoader(dataset_path, batch_size=5, shuffle=True, seed=7, transforms=TRAIN,
                        num_threads=threads, device="cpu") as loader:
            assert loader.stats().num_threads == threads
            runs.append(collect(loader))
    assert len(runs[0]) == 5 and runs[0][0][0].shape == (5, 3, 24, 24)
    assert runs[0][0][0].dtype == torch.uint8 and runs[0][0][1].dtype == torch.int64
    assert same_batches(runs[0], runs[1]) and same_batches(runs[0], runs[2])
    with FastLoader(dataset_path, batch_size=5, shuffle=True, seed=8, transforms=TRAIN) as other:
        assert not same_batches(runs[0], collect(other))


def test_epochs_are_permutations_that_differ_and_labels_follow_sampler(dataset_path: Path) -> None:
    labels_all = open_dataset(dataset_path).labels
    with FastLoader(dataset_path, batch_size=4, shuffle=True, transforms=TRAIN) as loader:
        orders = []
        for epoch in range(3):
            loader.set_epoch(epoch)
            order = list(loader.sampler)
            assert sorted(order) == list(range(24))
            labels = torch.cat([labels for _, labels in loader])
            assert labels.tolist() == labels_all[order].tolist()
            orders.append(order)
        # Every pair differs (a chained != would never compare epoch 0 with epoch 2).
        assert len({tuple(order) for order in orders}) == 3
        # A pass run to its end advances the epoch by itself, like DataLoader reshuffling.
        assert loader.sampler.epoch == 3


def test_resume_mid_epoch_gives_the_remaining_batches(dataset_path: Path) -> None:
    options = {"batch_size": 3, "shuffle": True, "seed": 3, "transforms": TRAIN}
    with FastLoader(dataset_path, **options) as loader:
        loader.set_epoch(2)
        full = collect(loader)
    with FastLoader(dataset_path, **options) as loader:
        loader.set_epoch(2)
        iterator = iter(loader)
        head = [next(iterator) for _ in range(3)]
        state = loader.state_dict()
        del iterator
    assert state["epoch"] == 2 and state["batches_done"] == 3
    assert same_batches([(i.clone(), lab) for i, lab in head], full[:3])
    with FastLoader(dataset_path, **options) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(2)  # the usual training-loop call keeps the pending resume
        assert same_batches(collect(resumed), full[3:])
        assert resumed.state_dict()["epoch"] == 3
        with pytest.raises(InvalidArgumentError, match="seed"):  # batch_size may change
            resumed.load_state_dict({**state, "seed": 4})


def test_validation_pipeline_and_normalize_on_device(dataset_path: Path) -> None:
    val = [Resize(28), CenterCrop(24)]
    with FastLoader(dataset_path, batch_size=8, transforms=val) as raw:
        pixels = collect(raw)
    mean, std = MEAN, STD
    with FastLoader(dataset_path, batch_size=8, transforms=val, normalize=(mean, std)) as norm:
        normalized = collect(norm)
    m = torch.tensor(mean).view(1, 3, 1, 1)
    s = torch.tensor(std).view(1, 3, 1, 1)
    for (u8, _), (f32, _) in zip(pixels, normalized, strict=True):
        assert f32.dtype == torch.float32 and f32.is_contiguous()
        torch.testing.assert_close(f32, (u8.float() / 255 - m) / s, atol=1e-5, rtol=1e-5)
    with FastLoader(dataset_path, batch_size=8, transforms=val, normalize=(mean, std),
                    dtype=torch.float16) as half:
        assert next(iter(half))[0].dtype == torch.float16


def test_without_transforms_images_need_one_size(dataset_path: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="RandomResizedCrop"):
        FastLoader(dataset_path, batch_size=4)
    tree = tmp_path / "same"
    for k in range(2):
        (tree / f"c{k}").mkdir(parents=True)
        for i in range(3):
            image = photo_like(20, 30, 10 * k + i)
            (tree / f"c{k}" / f"{i}.png").write_bytes(encode(image, "PNG"))
    pack(tree, tmp_path / "same.h5", workers=1)
    with FastLoader(tmp_path / "same.h5", batch_size=6) as loader:
        (images, labels), = list(loader)
    assert images.shape == (6, 3, 20, 30) and labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert torch.equal(images[4].permute(1, 2, 0), torch.from_numpy(photo_like(20, 30, 11)))


def test_drop_last_and_len(dataset_path: Path) -> None:
    with FastLoader(dataset_path, batch_size=5, drop_last=True, transforms=TRAIN) as loader:
        batches = collect(loader)
        assert len(loader) == len(batches) == 4
        assert all(images.shape[0] == 5 for images, _ in batches)


def test_bad_arguments_are_named(dataset_path: Path) -> None:
    cases = [({"batch_size": 0}, "batch_size"), ({"prefetch": 0}, "prefetch"),
             ({"on_error": "ignore"}, "on_error"), ({"num_workers": 2}, "num_workers"),
             ({"num_threads": 0}, "num_threads"), ({"normalize": ((1, 2), (3, 4))}, "normalize"),
             ({"rank": 0}, "rank"), ({"device": "cuda:0" if not torch.cuda.is_available()
                                       else "nonsense"}, "device")]
    for kwargs, name in cases:
        with pytest.raises(InvalidArgumentError, match=name):
            FastLoader(dataset_path, transforms=TRAIN, **kwargs)
    with pytest.raises(InvalidTypeError, match="data"):
        FastLoader(12345, batch_size=2)
    with pytest.raises(InvalidTypeError, match="shuffle"):
        FastLoader(dataset_path, shuffle="yes", transforms=TRAIN)
    with pytest.raises(InvalidArgumentError, match="normalized"):
        FastLoader(dataset_path, transforms=TRAIN, normalize=((0.5,) * 3, (0.2,) * 3),
                   dtype=torch.uint8)
