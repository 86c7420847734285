"""A checkpoint taken after exactly len(loader) batches (StopIteration not reached yet) resumes
at the next epoch's first batch, on the packed and the DALI loader alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastloader import FastLoader
from fastloader.format.open import open_dataset
from fastloader.loader.dali.pipeline import dali_available
from helpers import TRAIN, collect, same_batches

OPTIONS: dict[str, Any] = {"batch_size": 5, "shuffle": True, "seed": 11, "transforms": TRAIN,
                           "device": "cpu"}


def _epoch_end_state(loader: Any) -> dict[str, Any]:
    """The checkpoint after a whole pass's batches were taken, StopIteration still ahead."""
    iterator = iter(loader)
    for _ in range(len(loader)):
        next(iterator)
    state = loader.state_dict()
    del iterator
    return state


def _check(make: Any) -> None:
    with make() as reference:
        first = collect(reference)
        second = collect(reference)  # the pass an uninterrupted run reads next
    assert not same_batches(first, second)
    with make() as loader:
        state = _epoch_end_state(loader)
    assert (state["epoch"], state["batches_done"]) == (1, 0)
    with make() as resumed:
        resumed.load_state_dict(state)
        assert same_batches(collect(resumed), second)
    # A checkpoint written before this rule (the whole epoch done, same epoch) resumes so too.
    with make() as resumed:
        resumed.load_state_dict({**state, "epoch": 0, "batches_done": len(resumed)})
        assert resumed.state_dict()["epoch"] == 1
        assert same_batches(collect(resumed), second)


def test_packed_loader_resumes_an_epoch_end_checkpoint_at_the_next_epoch(
        dataset_path: Path) -> None:
    _check(lambda: FastLoader(dataset_path, **OPTIONS))


def test_mid_epoch_checkpoints_are_unchanged(dataset_path: Path) -> None:
    with FastLoader(dataset_path, **OPTIONS) as loader:
        iterator = iter(loader)
        for _ in range(len(loader) - 1):
            next(iterator)
        state = loader.state_dict()
        del iterator
        assert (state["epoch"], state["batches_done"]) == (0, len(loader) - 1)


@pytest.mark.skipif(not dali_available(), reason="NVIDIA DALI is not importable here")
def test_dali_loader_resumes_an_epoch_end_checkpoint_at_the_next_epoch(
        dataset_path: Path) -> None:
    from fastloader.loader.dali.loader import DaliLoader

    dataset = open_dataset(dataset_path)  # the DALI tests' rule: one open dataset per process
    try:
        _check(lambda: DaliLoader(dataset, batch_size=5, shuffle=True, seed=11,
                                  transforms=TRAIN, device="cpu", num_threads=1))
    finally:
        dataset.close()
