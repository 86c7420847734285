"""The packed path's sampler= (any iterable of indices) and batch_transform= (a CPU callable)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import SubsetRandomSampler, WeightedRandomSampler

from fastloader.decode.augment import CenterCrop, RandomResizedCrop
from fastloader.errors import FastloaderError
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

SAMPLES = 12


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sampler")
    # One image per class: a label names its sample.
    make_tree(root / "tree", classes=SAMPLES, per_class=1, size=(30, 36))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def read(path: Path, **kwargs: object) -> list[int]:
    options = {"batch_size": 4, "transforms": [CenterCrop(16)], "device": "cpu",
               "num_threads": 1, **kwargs}
    with FastLoader(path, **options) as loader:  # type: ignore[arg-type]
        return [i for _, labels in loader for i in labels.tolist()]


def weighted() -> WeightedRandomSampler:
    weights = [1.0] * 6 + [0.0] * 6  # only samples 0..5 can be drawn
    return WeightedRandomSampler(weights, num_samples=10)


def test_a_weighted_sampler_sets_the_order_reproducibly(packed: Path) -> None:
    first = read(packed, sampler=weighted(), seed=3)
    assert len(first) == 10 and set(first) <= set(range(6))
    assert read(packed, sampler=weighted(), seed=3) == first  # reseeded from (seed, epoch)
    assert read(packed, sampler=weighted(), seed=4) != first


def test_a_subset_sampler_reads_only_the_subset(packed: Path) -> None:
    subset = [1, 3, 5, 7]
    assert sorted(read(packed, sampler=SubsetRandomSampler(subset))) == subset
    assert read(packed, sampler=[9, 8, 7]) == [9, 8, 7]  # a plain list is a sampler too


def test_a_sampler_is_sharded_across_ranks(packed: Path) -> None:
    order = [11, 10, 9, 8, 7, 6, 5]
    parts = [read(packed, sampler=order, rank=r, world_size=2) for r in (0, 1)]
    assert parts == [[11, 9, 7, 5], [10, 8, 6, 11]]  # padded by wrapping, like DistributedSampler


def test_resume_with_a_sampler_is_exact(packed: Path) -> None:
    options = {"batch_size": 2, "transforms": [CenterCrop(16)], "device": "cpu",
               "num_threads": 1}
    with FastLoader(packed, sampler=weighted(), **options) as loader:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        rest = [labels.tolist() for _, labels in it]
    with FastLoader(packed, sampler=weighted(), **options) as again:
        again.load_state_dict(state)
        assert [labels.tolist() for _, labels in again] == rest


def test_bad_samplers_are_refused_clearly(packed: Path) -> None:
    with pytest.raises(FastloaderError, match="shuffle=True is invalid: sampler= sets"):
        FastLoader(packed, batch_size=2, shuffle=True, sampler=[0, 1],
                   transforms=[CenterCrop(16)])
    with pytest.raises(FastloaderError, match="yielded index 99"):
        read(packed, sampler=[0, 99])
    with pytest.raises(FastloaderError, match="sampler must be a sized iterable"):
        FastLoader(packed, batch_size=2, sampler=iter([0, 1]), transforms=[CenterCrop(16)])


def test_batch_transform_runs_on_the_uint8_batch(packed: Path) -> None:
    options = {"batch_size": 4, "transforms": [RandomResizedCrop(16)], "device": "cpu",
               "num_threads": 2, "seed": 1}
    seen: list[tuple[torch.dtype, tuple[int, ...]]] = []

    def invert(images: torch.Tensor) -> torch.Tensor:
        seen.append((images.dtype, tuple(images.shape)))
        return 255 - images

    def invert_in_place(images: torch.Tensor) -> torch.Tensor:
        return images.neg_().add_(255)  # uint8 arithmetic wraps: 255 - x

    with FastLoader(packed, **options) as plain:  # type: ignore[arg-type]
        expected = [255 - images for images, _ in plain]
    for transform in (invert, invert_in_place):
        with FastLoader(packed, batch_transform=transform, **options) as loader:  # type: ignore[arg-type]
            got = [images for images, _ in loader]
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert seen[0] == (torch.uint8, (4, 3, 16, 16))
    # With normalize the transform still sees uint8; normalization follows it.
    norm = ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    with FastLoader(packed, batch_transform=invert, normalize=norm, **options) as loader:  # type: ignore[arg-type]
        first = next(iter(loader))[0]
    assert torch.allclose(first, (expected[0].float() / 255 - 0.5) / 0.25, atol=1e-5)


def test_a_batch_transform_that_changes_the_batch_shape_is_refused(packed: Path) -> None:
    with pytest.raises(FastloaderError, match=r"batch_transform returned a torch.float32"):
        read(packed, batch_transform=lambda images: images.float())
    with pytest.raises(FastloaderError, match="batch_transform=1 is invalid: must be callable"):
        FastLoader(packed, batch_size=2, batch_transform=1, transforms=[CenterCrop(16)])
