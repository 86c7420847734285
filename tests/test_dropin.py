"""The drop-in path: FastLoader(any dataset DataLoader takes: map-style, a datasets.Dataset,
iterable) behaves like a tuned DataLoader."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fastloader.errors import FastloaderError, InvalidArgumentError
from fastloader.loader.dropin.loader import DropInLoader
from fastloader.loader.loader import FastLoader

pytestmark = pytest.mark.native_neutral


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


def rows_dataset(n: int = 10):
    """A real datasets.Dataset (not a torch Dataset): a 2x2 image, a ClassLabel, a text and a
    list of floats."""
    import datasets
    import numpy as np
    from PIL import Image

    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["a", "b", "c"]),
                                  "text": datasets.Value("string"),
                                  "vec": datasets.List(datasets.Value("float32"))})
    return datasets.Dataset.from_dict(
        {"image": [Image.fromarray(np.full((2, 2, 3), i, np.uint8)) for i in range(n)],
         "label": [i % 3 for i in range(n)], "text": [f"t{i}" for i in range(n)],
         "vec": [[i / 2] * (1 + i % 3) for i in range(n)]},
        features=features)


def test_dropin_takes_a_datasets_dataset_as_dataloader_does() -> None:
    import numpy as np

    dataset = rows_dataset()
    loader = FastLoader(dataset, batch_size=4, num_workers=0, collate_fn=list)
    assert isinstance(loader, DropInLoader) and len(loader) == 3
    rows = [row for batch in loader for row in batch]
    assert [int(np.asarray(r["image"])[0, 0, 0]) for r in rows] == list(range(10))
    assert [r["label"] for r in rows] == [i % 3 for i in range(10)]
    assert [r["text"] for r in rows] == [f"t{i}" for i in range(10)]
    assert [r["vec"] for r in rows] == [[i / 2] * (1 + i % 3) for i in range(10)]
    assert loader.dataset.features["label"].names == ["a", "b", "c"]
    torch_rows = FastLoader(dataset.remove_columns("vec").with_format("torch"), batch_size=5,
                            num_workers=0)
    images = torch.cat([b["image"] for b in torch_rows])
    assert images.shape == (10, 3, 2, 2) and images[:, 0, 0, 0].tolist() == list(range(10))
    (batch,) = FastLoader([3, 1, 2], batch_size=3, num_workers=0)  # a list is map-style too
    assert batch.tolist() == [3, 1, 2]


class Stream(torch.utils.data.IterableDataset):
    """0..9 once, however many workers read it (it does not split itself)."""

    def __iter__(self):
        return iter(range(10))


def test_dropin_takes_iterable_datasets() -> None:
    from fastloader.loader.order.sampler import threads_per_rank

    # a torch IterableDataset gets DataLoader's default: no workers, so each item comes once
    loader = FastLoader(Stream(), batch_size=5)
    assert loader.loader.num_workers == 0
    assert [v for b in loader for v in b.tolist()] == list(range(10))
    stream = rows_dataset().to_iterable_dataset(num_shards=3)
    loader = FastLoader(stream, batch_size=4, collate_fn=list)
    assert loader.loader.num_workers == min(3, threads_per_rank(1))
    assert sorted(r["text"] for b in loader for r in b) == sorted(f"t{i}" for i in range(10))
    loader.close()
    with pytest.raises(InvalidArgumentError, match=r"shuffle=True is invalid: does not apply "
                       r"to an iterable dataset.*dataset\.shuffle\(seed"):
        FastLoader(stream, shuffle=True)
    parts = [[row["text"] for b in FastLoader(stream, batch_size=10, rank=rank, world_size=2,
                                              num_workers=0, collate_fn=list) for row in b]
             for rank in range(2)]
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == sorted(f"t{i}" for i in range(10))
