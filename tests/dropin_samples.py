"""Datasets and helpers of the drop-in contract tests (tests/test_dropin_contract*.py): each at a
module's top level, so a spawn or forkserver worker can import it; small, CPU only."""

from __future__ import annotations

import math
import os
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

Point = namedtuple("Point", "x y")  # at the top level: it pickles by reference


class Numbers(Dataset):
    """Item i is i; the items in `bad` raise ValueError naming the index."""

    def __init__(self, n: int = 10, bad: tuple[int, ...] = ()) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i in self.bad:
            raise ValueError(f"item {i} is bad")
        return i


class Samples(Dataset):
    """Item i as `kind` says: "dict", "namedtuple", "string" or "nested" (a nested tensor)."""

    def __init__(self, kind: str, n: int = 6) -> None:
        self.kind, self.n = kind, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if self.kind == "dict":
            return {"x": torch.full((2,), float(i)), "label": i % 3, "name": f"s{i}"}
        if self.kind == "namedtuple":
            return Point(torch.tensor([i, -i]), float(i) / 2)
        if self.kind == "string":
            return f"sample {i}"
        return torch.nested.nested_tensor([torch.arange(i + 1.0), torch.ones(2)])


def nest(batch: list[torch.Tensor]) -> torch.Tensor:
    """A collate_fn making a nested tensor of a batch of 1-d tensors of different lengths."""
    return torch.nested.nested_tensor(batch)


class Ragged(Dataset):
    """Item i is a 1-d tensor of i + 1 values (collated by nest)."""

    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.arange(i + 1.0)


class Stream(IterableDataset):
    """0..n-1, split between workers by get_worker_info(); `bad` values raise ValueError."""

    def __init__(self, n: int = 10, bad: tuple[int, ...] = ()) -> None:
        self.n, self.bad = n, bad
        self.iterated = 0

    def __iter__(self) -> Iterator[int]:
        self.iterated += 1  # when iter() is called, not at the first next()
        return self._items()

    def _items(self) -> Iterator[int]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            if i in self.bad:
                raise ValueError(f"item {i} is bad")
            yield i


class SizedStream(Stream):
    """Stream with a __len__ (DataLoader's len() is then the batches of n items)."""

    def __len__(self) -> int:
        return self.n


class Holder:
    """A namedtuple defined in a class body: pickle looks it up as a top-level name and fails."""

    Pair = namedtuple("Pair", "a b")


class Unpicklable(Dataset):
    """Item i is a Holder.Pair: fine in this process, unpicklable on its way from a worker."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        return Holder.Pair(i, -i)


class Dies(Dataset):
    """Item `at` ends the worker process that reads it (os._exit), as a crash would."""

    def __init__(self, at: int = 2) -> None:
        self.at = at

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> int:
        if i == self.at and get_worker_info() is not None:
            os._exit(3)
        return i


def outcomes(loader: Any, limit: int = 100) -> list[Any]:
    """What a loop that catches per-batch errors and carries on sees: each batch, or the name
    of the error a batch raised, to the end of the pass (or `limit` steps)."""
    seen: list[Any] = []
    iterator = iter(loader)
    for _ in range(limit):
        try:
            seen.append(next(iterator))
        except StopIteration:
            break
        except Exception as error:  # the point is to carry on after any error
            seen.append(type(error).__name__)
    return seen


def same(a: Any, b: Any) -> bool:
    """Whether two batches are the same: types, structure and values (nested tensors too)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.is_nested:
            return b.is_nested and len(a.unbind()) == len(b.unbind()) and all(
                same(x, y) for x, y in zip(a.unbind(), b.unbind(), strict=True))
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def same_outcomes(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def refusal(build: Callable[[], Any]) -> type[BaseException] | None:
    """The exception type building (and starting) a loader raises, None if it does not."""
    try:
        loader = build()
        iter(loader)
    except Exception as error:  # compared with torch's refusal
        return type(error)
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    return None


class Offset(Dataset):
    """Item i is i + the offset its worker's worker_init_fn (offset_by_worker) set."""

    offset = 0

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        return i + self.offset


def offset_by_worker(worker_id: int) -> None:
    """A worker_init_fn: worker k's copy of an Offset dataset adds 100 * (k + 1)."""
    info = get_worker_info()
    assert info is not None
    info.dataset.offset = 100 * (worker_id + 1)


class WithLambda(Numbers):
    """A dataset holding a lambda: it cannot be pickled to a spawned worker."""

    def __init__(self) -> None:
        super().__init__(4)
        self.transform = lambda x: x
