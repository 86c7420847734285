"""Elastic resume under the shard-aware shuffle (shuffle_window): another batch size on the same
world continues each rank's own order; another world size mid-epoch reads, strided, what each
old rank had left, rank after rank (loader/order/resume.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fastloader import FastLoader
from fastloader.decode.augment import CenterCrop
from fastloader.pack.pipeline.tree import pack
from helpers import upload_tree
from imagegen import make_tree

SAMPLES = 38  # one image per class: a label names its sample
OPTIONS: dict[str, Any] = {"shuffle": True, "seed": 3, "shuffle_window": 2, "num_threads": 1,
                           "device": "cpu", "transforms": [CenterCrop(8)]}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("elastic_shards")
    make_tree(root / "tree", classes=SAMPLES, per_class=1, size=(12, 16))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True, shard_size=2500)
    return root / "data.lmdb"


def run(path: Path | str, world: int, batch_size: int, state: dict[str, Any] | None,
        steps: int | None = None,
        **options: Any) -> tuple[list[int], dict[str, Any], list[list[int]]]:
    """Every rank loads `state` (or starts epoch 0) and takes `steps` batches (None: the rest
    of the epoch): the labels delivered, rank 0's state after, and each rank's labels."""
    ranks, states = [], []
    for rank in range(world):
        with FastLoader(path, batch_size=batch_size, rank=rank, world_size=world,
                        **OPTIONS, **options) as loader:
            if state is not None:
                loader.load_state_dict(state)
            iterator = iter(loader)
            taken = [next(iterator)[1].tolist() for _ in range(steps)] if steps else \
                [labels.tolist() for _, labels in iterator]
            ranks.append([lab for batch in taken for lab in batch])
            states.append(loader.state_dict())
            del iterator
    assert len({len(r) for r in ranks}) == 1  # every rank the same number of samples
    return [lab for r in ranks for lab in r], states[0], ranks


def padding(path: Path, world: int) -> int:
    """The repeats an uninterrupted epoch on `world` ranks already has."""
    whole, _, _ = run(path, world, 4, None)
    return len(whole) - SAMPLES


def test_assumptions(sharded: Path) -> None:
    with FastLoader(sharded, batch_size=2, **OPTIONS) as loader:
        assert len(loader.dataset.packed.manifest.shards) >= 4
        assert sorted(loader.dataset.packed.labels.tolist()) == list(range(SAMPLES))


@pytest.mark.parametrize(("world", "batch_size"), [(3, 3), (1, 4), (4, 1)])
def test_another_world_size_mid_epoch_reads_the_rest_once(sharded: Path, world: int,
                                                          batch_size: int) -> None:
    head, state, _ = run(sharded, 2, 2, None, steps=2)
    assert state["position"] == 4 and state["moved_shards"] is None  # 4 of each rank's order
    rest, after, _ = run(sharded, world, batch_size, state)
    counts = Counter(head + rest)
    assert set(counts) == set(range(SAMPLES))
    assert sum(counts.values()) - SAMPLES < padding(sharded, 2) + world  # no more repeats
    assert after["epoch"] == 1  # the epoch ended where the rest did


def test_a_moved_pass_moves_again_and_resumes_exactly_on_its_shape(sharded: Path) -> None:
    head, state, _ = run(sharded, 2, 2, None, steps=2)
    _, _, whole = run(sharded, 3, 3, state)  # the moved pass, uninterrupted
    middle, moved, _ = run(sharded, 3, 3, state, steps=1)
    assert moved["moved_shards"] == [2, False, 4] and moved["position"] == 9
    _, _, same = run(sharded, 3, 3, moved)  # on its own shape: the rest of that very pass
    assert same == [w[3:] for w in whole]
    rest, _, _ = run(sharded, 2, 5, moved)  # and on another: what no rank read yet
    counts = Counter(head + middle + rest)
    assert set(counts) == set(range(SAMPLES))
    assert sum(counts.values()) - SAMPLES < padding(sharded, 2) + 3 + 2


def test_another_batch_size_on_the_same_world_keeps_each_rank_s_order(sharded: Path) -> None:
    _, state, _ = run(sharded, 2, 2, None, steps=2)
    _, _, whole = run(sharded, 2, 4, None)
    _, after, ranks = run(sharded, 2, 3, state)
    assert ranks == [w[4:] for w in whole]
    assert after["epoch"] == 1


@pytest.mark.heavy
def test_a_url_dataset_resumes_on_another_world_size(sharded: Path, s3: Any,
                                                     tmp_path: Path) -> None:
    pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
    url = "s3://bucket/named.lmdb"
    upload_tree(sharded, url)
    local_head, local_state, _ = run(sharded, 2, 2, None, steps=2)
    head, state, _ = run(url, 2, 2, None, steps=2, cache_dir=tmp_path / "cache")
    assert head == local_head  # the same order as the local copy's
    assert state == local_state  # the dataset's fingerprint too: a copy is the same dataset
    rest, _, _ = run(url, 3, 3, state, cache_dir=tmp_path / "cache")
    assert set(head + rest) == set(range(SAMPLES))
