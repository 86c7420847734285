"""Elastic resume in one process: ranks given as rank=/world_size=, a checkpoint of 4 ranks taken
mid-epoch resumed on other world sizes, batch sizes and drop_last (loader/order/resume.py).

Real gloo processes: tests/test_elastic_ddp.py. Refused states: tests/test_elastic_refusals.py.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader import FastLoader
from fastloader.decode.augment import CenterCrop, RandomHorizontalFlip, RandomResizedCrop
from fastloader.format.open import open_dataset
from fastloader.loader.dali.pipeline import dali_available
from fastloader.pack.pipeline.tree import pack
from helpers import same_batches
from imagegen import make_tree

SAMPLES = 38  # one image per class: a label names its sample; 38 divides by none of 3, 4, 8
OPTIONS: dict[str, Any] = {"shuffle": True, "seed": 5, "num_threads": 1, "device": "cpu",
                           "transforms": [RandomResizedCrop(8), RandomHorizontalFlip()]}


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("elastic")
    make_tree(root / "tree", classes=SAMPLES, per_class=1, size=(12, 16))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def loaders(path: Path, world: int, batch_size: int, **options: Any) -> list[Any]:
    return [FastLoader(path, batch_size=batch_size, rank=r, world_size=world,
                       **{**OPTIONS, **options}) for r in range(world)]


def stopped(path: Path, world: int, batch_size: int, steps: int,
            **options: Any) -> tuple[list[int], dict[str, Any]]:
    """Every rank takes `steps` batches of epoch 1: the labels delivered, and rank 1's state
    (rank 0's on one rank)."""
    delivered: list[int] = []
    states = []
    for loader in loaders(path, world, batch_size, **options):
        with loader:
            loader.set_epoch(1)
            iterator = iter(loader)
            for _ in range(steps):
                delivered += next(iterator)[1].tolist()
            states.append(loader.state_dict())
            del iterator
    assert all(s["position"] == states[0]["position"] for s in states)  # global, not per rank
    return delivered, states[1 % world]


def resumed(path: Path, state: dict[str, Any], world: int, batch_size: int,
            **options: Any) -> list[list[Any]]:
    """Each rank of the new world loads `state` and reads the rest of the epoch."""
    batches = []
    for loader in loaders(path, world, batch_size, **options):
        with loader:
            loader.load_state_dict(state)
            batches.append([(images.clone(), labels) for images, labels in loader])
            assert len(batches[-1]) == loader.sampler.num_batches(batch_size) - \
                state["batches_done"]
    assert len({len(b) for b in batches}) == 1  # DDP: every rank the same number of batches
    return batches


@pytest.mark.parametrize(("world", "batch_size", "drop_last"),
                         [(3, 5, False), (8, 2, False), (3, 4, True)])
def test_four_ranks_stopped_mid_epoch_resume_on_another_shape(
        named: Path, world: int, batch_size: int, drop_last: bool) -> None:
    head, state = stopped(named, 4, 3, steps=2)  # 24 of 38 delivered
    assert state["position"] == 24 and state["world_size"] == 4
    tail = resumed(named, state, world, batch_size, drop_last=drop_last)
    rest = [label for rank in tail for _, labels in rank for label in labels.tolist()]
    counts = Counter(head + rest)
    assert not set(head) & set(rest)  # nothing delivered twice across the stop
    if drop_last:  # 14 left over 3 ranks: 4 each (2 dropped), one batch of 4 each
        assert len(rest) == 12 and max(counts.values()) == 1
    else:  # every sample once, plus the padding that evens the ranks (< world)
        assert set(counts) == set(range(SAMPLES))
        assert sum(counts.values()) - SAMPLES == -(-14 // world) * world - 14


def test_the_next_epoch_is_a_fresh_run_of_the_new_shape(named: Path) -> None:
    _, state = stopped(named, 4, 3, steps=1)
    after, fresh = [], []
    for loader in loaders(named, 3, 5):
        with loader:
            loader.load_state_dict(state)
            list(loader)  # the rest of epoch 1
            after.append([(i.clone(), lab) for i, lab in loader])  # epoch 2
    for loader in loaders(named, 3, 5):
        with loader:
            loader.set_epoch(2)
            fresh.append([(i.clone(), lab) for i, lab in loader])
    assert all(same_batches(a, b) for a, b in zip(after, fresh, strict=True))


def test_a_moved_pass_resumes_exactly_on_its_own_shape(named: Path) -> None:
    _, state = stopped(named, 4, 3, steps=1)
    whole = resumed(named, state, 3, 4)  # the moved pass, uninterrupted
    again = []
    for rank, loader in enumerate(loaders(named, 3, 4)):
        with loader:
            loader.load_state_dict(state)
            iterator = iter(loader)
            first = next(iterator)
            assert same_batches([(first[0].clone(), first[1])], whole[rank][:1])
            mid = loader.state_dict()
            del iterator
            assert (mid["pass_start"], mid["pass_batch"]) == (12, 1)
            assert mid["batches_done"] == 2 and mid["position"] == 12 + 3 * 4
            loader.load_state_dict(mid)
            again.append([(i.clone(), lab) for i, lab in loader])
    assert all(same_batches(a, w[1:]) for a, w in zip(again, whole, strict=True))


def test_a_moved_pass_numbers_its_batches_on_from_the_saved_ones(named: Path) -> None:
    """Crops are drawn per batch from (seed, epoch, batch, rank): a moved pass numbers its
    batches after those already done, so none repeats a draw the epoch delivered."""
    _, state = stopped(named, 4, 3, steps=2)
    with FastLoader(named, batch_size=3, rank=0, world_size=3, **OPTIONS) as loader:
        loader.load_state_dict(state)
        assert loader.sampler.pass_layout() == (24, 2)
        assert loader.sampler.num_batches(3) == 4  # 14 left: 5 a rank, 2 after the 2 done
        assert len(loader) == 5  # never less than a fresh epoch's (ceil(13 / 3)): Lightning
        assert loader.state_dict()["batches_done"] == 2


def test_a_version_1_state_still_loads_and_moves(named: Path) -> None:
    with FastLoader(named, batch_size=3, **{**OPTIONS, "transforms": [CenterCrop(8)]}) as a:
        full = [(i.clone(), lab) for i, lab in a]
        old = {"version": 1, "epoch": 0, "batches_done": 4, "seed": 5, "num_samples": SAMPLES,
               "batch_size": 3, "rank": 0, "world_size": 1, "shuffle": True,
               "drop_last": False}
        a.load_state_dict(old)  # today's format, same shape: the same batches as before
        assert same_batches([(i.clone(), lab) for i, lab in a], full[4:])
        a.load_state_dict({**old, "batch_size": 4, "batches_done": 3})  # 12 samples done
        rest = [lab for _, labels in a for lab in labels.tolist()]
    assert rest == [lab for _, labels in full for lab in labels.tolist()][12:]


@pytest.mark.skipif(not dali_available(), reason="NVIDIA DALI is not importable here")
def test_the_dali_loader_resumes_a_packed_checkpoint_on_another_shape(named: Path) -> None:
    from fastloader.loader.dali.loader import DaliLoader

    _, state = stopped(named, 4, 3, steps=2)
    packed = [[lab for _, labels in rank for lab in labels.tolist()]
              for rank in resumed(named, state, 3, 4)]
    dataset = open_dataset(named)  # the DALI tests' rule: one open dataset per process
    try:
        for rank in range(3):
            with DaliLoader(dataset, batch_size=4, shuffle=True, seed=5, rank=rank,
                            world_size=3, transforms=[CenterCrop(8)], device="cpu",
                            num_threads=1) as loader:
                loader.load_state_dict(state)
                assert len(loader) == 2 + 2  # 14 left: 5 a rank, 2 batches of 4
                assert [lab for _, labels in loader for lab in labels.tolist()] == packed[rank]
    finally:
        dataset.close()


def test_an_iter_that_yields_nothing_keeps_the_epoch_and_a_loaded_resume(named: Path) -> None:
    """Lightning calls iter() once to probe a loader before its fit starts the pass."""
    with FastLoader(named, batch_size=3, **OPTIONS) as reference:
        epoch0 = [(i.clone(), lab) for i, lab in reference]
    _, state = stopped(named, 1, 3, steps=2)
    with FastLoader(named, batch_size=3, **OPTIONS) as loader:
        iter(loader)  # the probe: no batch taken
        assert same_batches([(i.clone(), lab) for i, lab in loader], epoch0)
        loader.load_state_dict({**state, "epoch": 0})
        iter(loader)
        assert same_batches([(i.clone(), lab) for i, lab in loader], epoch0[2:])


def test_a_sampler_s_order_resumes_on_another_shape(named: Path) -> None:
    """sampler= sets the global order; a move shares its rest by the same rule."""
    order = [(7 * i) % SAMPLES for i in range(SAMPLES)]  # 7 is prime to 38: a permutation
    options = {"shuffle": False, "sampler": order}
    head, state = stopped(named, 4, 3, steps=2, **options)
    assert state["sampler"] is not None
    tail = resumed(named, state, 3, 5, **options)
    labels = open_dataset(named).labels
    rest = [[lab for _, batch in rank for lab in batch.tolist()] for rank in tail]
    for rank, got in enumerate(rest):  # positions 24 + rank, 24 + rank + 3, ... of the order
        expected = [order[24 + (rank + 3 * j) % 14] for j in range(len(got))]
        assert got == labels[expected].tolist()
    assert set(head) | {lab for r in rest for lab in r} == set(range(SAMPLES))


def test_a_moved_batch_is_drawn_from_its_own_number(named: Path) -> None:
    """Crops come from (seed, epoch, batch number, rank): batch 2 of a moved pass draws what
    batch 2 of a fresh run over the same samples draws."""
    order = list(range(SAMPLES))
    with FastLoader(named, batch_size=3, sampler=order, **{**OPTIONS, "shuffle": False}) as a:
        iterator = iter(a)
        next(iterator), next(iterator)  # 6 samples done
        state = a.state_dict()
        del iterator
    with FastLoader(named, batch_size=4, sampler=order, **{**OPTIONS, "shuffle": False}) as b:
        b.load_state_dict(state)
        moved = next(iter(b))  # batch number 2: samples 6..9
    fresh_order = [*range(10, 18), *range(6, 10), *range(18, SAMPLES), *range(6)]
    with FastLoader(named, batch_size=4, sampler=fresh_order,
                    **{**OPTIONS, "shuffle": False}) as c:
        batches = iter(c)
        next(batches), next(batches)
        fresh = next(batches)  # batch 2: samples 6..9 too
    assert moved[1].tolist() == fresh[1].tolist()
    assert torch.equal(moved[0], fresh[0])
