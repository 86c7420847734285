"""A packed loader's `dataset`: its passes as an IterableDataset of samples, for DataLoader clients.

Clients that rebuild a torch DataLoader from a loader's attributes (Accelerate's
`skip_first_batches` reads `dataset`, `batch_size`, `drop_last`, `collate_fn`, ...) need those
attributes to describe the loader. For a packed loader they do, exactly:
`DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last,
collate_fn=loader.collate_fn)` yields the loader's own batches, decoded by its fused pipeline and
not copied. `loader.dataset` (a `PassDataset`) runs a pass of the loader and yields each batch's
samples in order, each a row of views into the batch; `loader.collate_fn` (`collate_rows`) given
the rows of one whole batch, in order, hands that batch back, and collates any other samples as
torch's default_collate does. The packed dataset itself is `loader.dataset.packed`; its public
attributes (classes, fields, shapes, labels, root, ...) read through the view.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from fastloader.errors import FastloaderError
from fastloader.loader.images.collate import Views


class _Row:
    """What a row of a batch remembers: the batch it is a row of, and which row."""

    _fl_batch: Any = None
    _fl_row = -1


class RowTuple(tuple, _Row):
    """A sample of a tuple batch ((images, labels), or fields= in order)."""


class RowDict(dict, _Row):
    """A sample of a dict batch (a dataset's fields by name)."""


def rows_in(value: Any) -> int:
    """Samples in a batch or in one of its fields: a tensor's or array's first dimension, a
    list's length, a (values, lengths) pair's values, a dict's first field."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return int(value.shape[0]) if value.ndim else 1
    if isinstance(value, Views):  # views=: a value a view, each of the batch's samples
        return rows_in(value[0]) if value else 0
    if isinstance(value, list):
        return len(value)
    if isinstance(value, tuple) and value:
        return rows_in(value[0])
    if isinstance(value, Mapping) and value:
        return rows_in(next(iter(value.values())))
    raise FastloaderError(f"cannot count the samples of a {type(value).__name__} batch")


def _row_of(value: Any, k: int) -> Any:
    if isinstance(value, Views):  # sample k of each view
        return Views(_row_of(v, k) for v in value)
    if isinstance(value, tuple):
        return tuple(_row_of(v, k) for v in value)
    if isinstance(value, Mapping):
        return {name: _row_of(v, k) for name, v in value.items()}
    return value[k]  # a tensor, array or list: its k-th sample (a view, not a copy)


def batch_rows(batch: Any) -> Iterator[Any]:
    """The samples of one batch, in order, each remembering its batch."""
    for k in range(rows_in(batch)):
        row: _Row
        if isinstance(batch, Mapping):
            row = RowDict(_row_of(batch, k))
        else:
            row = RowTuple(_row_of(v, k) for v in batch)
        row._fl_batch, row._fl_row = batch, k
        yield row


def collate_rows(samples: list[Any]) -> Any:
    """A packed loader's collate_fn: the rows of one whole batch, in order, are that batch
    (no copy); any other samples are collated as torch's default_collate does.

    Args:
        samples: samples of the loader's `dataset` (or any samples default_collate takes).

    Returns:
        The batch the rows came from, or the collated samples.
    """
    batch = getattr(samples[0], "_fl_batch", None) if samples else None
    if batch is not None and len(samples) == rows_in(batch) and all(
            getattr(s, "_fl_batch", None) is batch and getattr(s, "_fl_row", -1) == k
            for k, s in enumerate(samples)):
        return batch
    return torch.utils.data.default_collate(samples)


class PassDataset(torch.utils.data.IterableDataset):
    """A packed loader's passes as samples: iterating runs a pass of the loader (what its own
    iter() would yield: the same epoch, resume point, rank share and pixels) and yields each
    batch's rows. len() is the samples a pass gives this rank (after sharding and padding), so
    a DataLoader over it has the loader's len."""

    def __init__(self, loader: Any, packed: Any) -> None:
        object.__setattr__(self, "_loader", weakref.ref(loader))  # the loader holds the view
        object.__setattr__(self, "packed", packed)

    def _live(self) -> Any:
        loader = self._loader()
        if loader is None:
            raise FastloaderError("the FastLoader of this dataset view was garbage-collected; "
                                  "keep a reference to the loader while you iterate")
        return loader

    def __iter__(self) -> Iterator[Any]:
        if torch.utils.data.get_worker_info() is not None:  # each worker would run every batch
            raise FastloaderError(
                "a FastLoader's dataset was iterated in a DataLoader worker process: it runs "
                "the loader's own decode threads, and every worker would yield the whole pass. "
                "Build the DataLoader with num_workers=0 (loader.num_workers is 0).")
        for batch in self._live():
            yield from batch_rows(batch)

    def __len__(self) -> int:
        return len(self._live().sampler)

    def __getattr__(self, name: str) -> Any:
        packed = self.__dict__.get("packed")
        if packed is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(packed, name)  # classes, fields, shapes, labels, root, record(), ...

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.packed, name, value)  # e.g. verify_records: a setting of the dataset

    def __reduce__(self) -> Any:
        raise FastloaderError(
            "a FastLoader's dataset cannot be pickled: it runs that loader's decode threads "
            "(a DataLoader with spawned workers pickles its dataset). Use num_workers=0, or "
            "build a FastLoader in the other process.")

    def __repr__(self) -> str:
        return f"PassDataset({self.packed!r})"


def unwrap_view(data: Any) -> Any:
    """A loader's `dataset` view stands for its packed dataset when given to a loader."""
    return data.packed if isinstance(data, PassDataset) else data
