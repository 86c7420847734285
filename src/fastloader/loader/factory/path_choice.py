"""Which loader path FastLoader's arguments choose (packed, DALI, mixed, drop-in, or the loader
of an output whose argument is given: audio=, video=, read from loader/factory/paths.py), and what
`data` the packed paths take."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

from fastloader.errors import invalid_argument
from fastloader.format.dataset import PackedDataset
from fastloader.loader.factory.options import BACKENDS
from fastloader.loader.factory.pass_dataset import PassDataset, unwrap_view
from fastloader.loader.factory.paths import PATHS

# What the packed paths take as `data`.
PackedData = str | os.PathLike[str] | PackedDataset | PassDataset


def is_dataset(data: object) -> bool:
    """A dataset as torch's DataLoader takes one (not a packed one, nor a path): a torch
    Dataset (an IterableDataset too), or anything with __getitem__ and __len__ (map-style: a
    datasets.Dataset, a list)."""
    if isinstance(data, (str, bytes, os.PathLike, PackedDataset)):
        return False
    return isinstance(data, torch.utils.data.Dataset) or (
        hasattr(data, "__getitem__") and hasattr(data, "__len__"))


def is_mix(data: object) -> bool:
    """Whether `data` names a weighted mix: a non-empty list or tuple of packed sources
    (paths, URLs, PackedDatasets, packed loaders' `dataset`), or a dict name -> such a source."""
    values = list(data.values()) if isinstance(data, Mapping) else \
        list(data) if isinstance(data, (list, tuple)) else []
    return bool(values) and all(
        isinstance(unwrap_view(v), (str, os.PathLike, PackedDataset)) for v in values)


def path_of(data: object, options: Mapping[str, object]) -> str:
    """The path for these arguments (`options`: FastLoader's keyword arguments): the mixed
    loader for a list or dict of packed datasets, the drop-in loader for a dataset DataLoader
    takes, the loader whose argument is given for one of loader/factory/paths.py (audio=, video=),
    the DALI loader for backend="dali", the packed loader otherwise (each checks the rest of
    its arguments)."""
    if is_mix(data):  # several packed datasets: a weighted mix (loader/mix/loader.py)
        return "mixed loader"
    data = unwrap_view(data)  # another packed loader's `dataset`: its packed dataset
    if is_dataset(data):
        return "drop-in loader"
    chosen = [(path.argument, path) for path in PATHS.values()
              if path.argument is not None and options.get(path.argument) is not None]
    if len(chosen) > 1:  # the first two named: one refusal at a time
        (first, one), (second, other) = chosen[:2]
        raise invalid_argument(
            second, options[second], f"{first}= and {second}= choose two loaders",
            f"Pass {first}= for a dataset of {one.records} or {second}= for one of "
            f"{other.records}, not both.")
    if chosen:
        return chosen[0][1].name
    backend = options.get("backend", "auto")
    if backend not in BACKENDS:
        raise invalid_argument("backend", backend, f"must be one of {BACKENDS}",
                               "Use 'auto' (native decode, Pillow without the extension) "
                               "or 'dali' for the NVIDIA DALI pipeline.")
    return "DALI loader" if backend == "dali" else "packed loader"
