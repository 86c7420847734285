"""What runs when a batch or a pass dies late: no Python code when a CPU batch's buffer is
released (a Ctrl-C can never be raised, and lost, inside it), and nothing that needs module
globals, which interpreter exit sets to None before the last objects die."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader import FastLoader
from fastloader.gpu import planar
from fastloader.gpu.planar import TensorPool
from fastloader.loader.packed import loader as packed
from helpers import TRAIN


@pytest.fixture()
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What Python would print as "Exception ignored in ..." during the test."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


def test_releasing_a_batch_runs_no_python_code() -> None:
    pool = TensorPool(keep=2)
    batch = pool.tensor((2, 3, 8, 8), torch.float32)
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":  # a Python frame: where a pending KeyboardInterrupt is raised
            calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        del batch
    finally:
        sys.setprofile(None)
    assert calls == []
    assert pool.free_buffers == 1  # and the buffer still came back


def test_a_batch_outliving_its_modules_is_released_quietly(
        monkeypatch: pytest.MonkeyPatch, unraisable: list[Any]) -> None:
    pool = TensorPool(keep=2)
    batch = pool.tensor((2, 3, 8, 8), torch.float32)
    for name, value in list(vars(planar).items()):  # what interpreter exit does to a module
        if isinstance(value, types.ModuleType):
            monkeypatch.setattr(planar, name, None)
    del batch
    assert unraisable == []


def test_a_pass_finalized_after_its_modules_is_quiet(
        dataset_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FastLoader(dataset_path, batch_size=4, transforms=TRAIN, device="cpu") as loader:
        iterator = iter(loader)
        next(iterator)
        monkeypatch.setattr(packed, "time", None)  # interpreter exit: the module's globals go
        iterator.close()  # the generator's finally, as finalization runs it
        monkeypatch.undo()
        assert sum(1 for _ in loader) == len(loader)  # the loader is whole afterwards


def test_a_loader_dropped_after_its_modules_is_quiet(
        dataset_path: Path, monkeypatch: pytest.MonkeyPatch, unraisable: list[Any]) -> None:
    from fastloader.loader.factory import interface

    loader = FastLoader(dataset_path, batch_size=4, transforms=TRAIN, device="cpu")
    for name, value in list(vars(interface).items()):  # what interpreter exit does to a module
        if isinstance(value, types.ModuleType):
            monkeypatch.setattr(interface, name, None)
    del loader  # the last reference: __del__ runs, and closes it
    monkeypatch.undo()
    assert unraisable == []
