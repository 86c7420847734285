"""Hugging Face Accelerate: prepare() and skip_first_batches() with FastLoader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastloader.decode.augment import CenterCrop
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

accelerate = pytest.importorskip("accelerate", reason="accelerate is a test dependency")


class Indices(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int) -> int:
        return i


@pytest.fixture(scope="module")
def accelerator() -> object:
    return accelerate.Accelerator(cpu=True)


def test_prepare_and_skip_first_batches_on_a_dropin_loader(accelerator: object) -> None:
    loader = FastLoader(Indices(), batch_size=4, num_workers=0)
    model = torch.nn.Linear(1, 1)
    prepared, _ = accelerator.prepare(loader, model)  # type: ignore[attr-defined]
    everything = [batch.tolist() for batch in prepared]
    assert everything == [[4 * b + k for k in range(4)] for b in range(5)]
    skipped = accelerator.skip_first_batches(prepared, 2)  # type: ignore[attr-defined]
    assert [batch.tolist() for batch in skipped] == everything[2:]
    # Read straight from the FastLoader, as Accelerate's own helpers do.
    skipped = accelerator.skip_first_batches(loader, 3)  # type: ignore[attr-defined]
    assert [batch.tolist() for batch in skipped] == everything[3:]


def test_prepare_keeps_a_packed_loader_and_resume_skips_exactly(
        accelerator: object, tmp_path: Path) -> None:
    make_tree(tmp_path / "tree", classes=2, per_class=5, size=(24, 28))
    pack(tmp_path / "tree", tmp_path / "data.lmdb", workers=1, quiet=True)
    options = {"batch_size": 3, "shuffle": True, "transforms": [CenterCrop(16)],
               "num_threads": 1, "device": "cpu"}
    with FastLoader(tmp_path / "data.lmdb", **options) as loader:
        prepared = accelerator.prepare(loader)  # type: ignore[attr-defined]
        assert prepared is loader  # batches are made on the loader's own threads
        everything = [images.clone() for images, _ in prepared]
        state = loader.state_dict()
        # Skipping by state decodes nothing (skip_first_batches decodes the skipped batches:
        # tests/test_clients_accelerate_skip.py): a checkpoint that says how many are done.
        state["epoch"], state["batches_done"] = 0, 2
    with FastLoader(tmp_path / "data.lmdb", **options) as again:
        again.load_state_dict(state)
        rest = [images for images, _ in again]
    assert len(rest) == len(everything) - 2
    assert all(torch.equal(a, b) for a, b in zip(rest, everything[2:], strict=True))
