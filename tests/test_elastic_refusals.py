"""What a checkpoint must match to resume (dataset, seed, shuffle, sampler weights, the shuffle
window) is checked and named (loader/order/resume.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader import FastLoader
from fastloader.decode.augment import CenterCrop
from fastloader.errors import InvalidArgumentError
from fastloader.pack.pipeline.tree import pack
from helpers import packed_tree
from imagegen import make_tree

OPTIONS: dict[str, Any] = {"batch_size": 2, "num_threads": 1, "device": "cpu",
                           "transforms": [CenterCrop(8)]}


def mid_epoch_state(path: Path, **options: Any) -> dict[str, Any]:
    with FastLoader(path, **{**OPTIONS, **options}) as loader:
        iterator = iter(loader)
        next(iterator)
        state = loader.state_dict()
        del iterator
    return state


def refuses(path: Path, state: dict[str, Any], field: str, **options: Any) -> None:
    with FastLoader(path, **{**OPTIONS, **options}) as loader, pytest.raises(
            InvalidArgumentError, match=rf"state\['{field}'\]"):
        loader.load_state_dict(state)


def test_another_dataset_seed_or_shuffle_is_refused_by_name(dataset_path: Path,
                                                           tmp_path: Path) -> None:
    state = mid_epoch_state(dataset_path, shuffle=True, seed=2)
    make_tree(tmp_path / "tree", classes=3, per_class=8, seed=1)  # same count, other images
    other = tmp_path / "data.lmdb"
    pack(tmp_path / "tree", other, workers=1, quiet=True)
    assert state["num_samples"] == 24
    refuses(other, state, "dataset", shuffle=True, seed=2)
    refuses(dataset_path, state, "seed", shuffle=True, seed=3)
    refuses(dataset_path, state, "shuffle", shuffle=False, seed=2)
    with FastLoader(dataset_path, **OPTIONS, shuffle=True, seed=2) as same:
        same.load_state_dict(state)  # the same dataset and arguments load


def test_a_state_of_another_shuffle_window_is_refused(tmp_path: Path) -> None:
    path = packed_tree(tmp_path, classes=3, per_class=8, shard_size=3000)
    state = mid_epoch_state(path, shuffle=True, shuffle_window=2)
    refuses(path, state, "shuffle_window", shuffle=True)
    refuses(path, state, "shuffle_window", shuffle=True, shuffle_window=3)


def test_a_state_of_other_sampler_weights_is_refused(dataset_path: Path) -> None:
    def weighted(weights: list[float]) -> torch.utils.data.WeightedRandomSampler:
        return torch.utils.data.WeightedRandomSampler(weights, num_samples=12)

    ones, skewed = [1.0] * 24, [1.0] * 12 + [3.0] * 12
    state = mid_epoch_state(dataset_path, sampler=weighted(ones))
    refuses(dataset_path, state, "sampler", sampler=weighted(skewed))
    refuses(dataset_path, state, "sampler")  # no sampler at all
    with FastLoader(dataset_path, **OPTIONS, sampler=weighted(ones)) as same:
        same.load_state_dict(state)
