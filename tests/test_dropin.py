"""The drop-in path: FastLoader(any map-style Dataset) behaves like a tuned DataLoader."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fastloader.errors import FastloaderError, InvalidArgumentError
from fastloader.loader.dropin import DropInLoader
from fastloader.loader.loader import FastLoader


class Squares(Dataset):
    """Item i is (a 2x2 float tensor filled with i, the label i % 3)."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((2, 2), float(i)), i % 3


def values(batches: list) -> list[float]:
    return [float(v) for images, _ in batches for v in images[:, 0, 0]]


def test_dropin_matches_a_seeded_dataloader() -> None:
    loader = FastLoader(Squares(), batch_size=4, shuffle=True, seed=5, num_workers=0,
                        device="cpu")
    reference = DataLoader(Squares(), batch_size=4, shuffle=True,
                           generator=torch.Generator().manual_seed(5))
    got = list(loader)
    assert len(loader) == len(got) == 3
    assert values(got) == values(list(reference))
    assert sorted(values(got)) == [float(i) for i in range(10)]
    images, labels = got[0]
    assert images.shape == (4, 2, 2) and labels.dtype == torch.int64
    assert loader.stats().images == 10
    loader.set_epoch(1)
    assert values(list(loader)) != values(got)


def test_dropin_defaults_and_worker_shutdown() -> None:
    loader = FastLoader(Squares(), batch_size=5, num_workers=1, device="cpu")
    assert isinstance(loader, DropInLoader)
    before = set(multiprocessing.active_children())
    for _ in range(2):
        batches = list(loader)
        assert values(batches) == [float(i) for i in range(10)]
        # The target is the CPU: pinning would only cost.
        assert not any(images.is_pinned() for images, _ in batches)
    workers = [w for w in multiprocessing.active_children() if w not in before]
    assert len(workers) == 1 and workers[0].is_alive()  # persistent: alive between passes
    loader.close()
    for worker in workers:
        worker.join(timeout=5)
    assert not any(w.is_alive() for w in workers)


def test_dropin_distributed_split_and_rejections() -> None:
    halves = [list(FastLoader(Squares(), batch_size=10, rank=r, world_size=2, num_workers=0))
              for r in range(2)]
    seen = values(halves[0]) + values(halves[1])
    assert len(seen) == 10 and sorted(seen) == [float(i) for i in range(10)]
    with pytest.raises(InvalidArgumentError, match="transforms"):
        FastLoader(Squares(), transforms=[])
    with pytest.raises(InvalidArgumentError, match="num_threads"):
        FastLoader(Squares(), num_threads=2)
    with pytest.raises(FastloaderError, match="packed"):
        FastLoader(Squares(), num_workers=0).state_dict()
