"""open_dataset: a packed dataset from a folder (PackedDataset) or a URL (RemoteDataset)."""

from __future__ import annotations

import os
from typing import Any

from fastloader.errors import invalid_argument, invalid_type
from fastloader.format.dataset import PackedDataset
from fastloader.format.remote import is_url
from fastloader.format.remote_dataset import RemoteDataset


def open_dataset(path: str | os.PathLike[str], **remote: Any) -> PackedDataset:
    """Open the packed dataset folder at path (e.g. out.lmdb/ or out.h5/), or at a URL.

    Args:
        path: the folder pack() wrote, or its fsspec URL (s3://, gs://, http(s)://, file://),
            read through a verified local cache (format/remote_dataset.RemoteDataset).
        **remote: for a URL: cache_dir, cache_limit, storage_options, prefetch, window.

    Returns:
        PackedDataset: the open dataset; close it, or use it in a with block.

    Raises:
        DatasetNotFoundError: there is no packed dataset at path.
        DatasetError: its manifest or index is unreadable or inconsistent.
    """
    if is_url(path):
        return RemoteDataset(str(path), **remote)
    given = {name: value for name, value in remote.items() if value is not None}
    if given:  # None means "not given", as FastLoader passes it along
        raise invalid_argument(next(iter(given)), given[next(iter(given))],
                               "applies to a dataset at a URL only",
                               "Drop it, or pass the dataset's s3:// (or other) URL.")
    return PackedDataset(path)


def dataset_from(data: object, accepted: str, **remote: Any) -> tuple[PackedDataset, bool]:
    """A loader's `data` as (dataset, owned): a PackedDataset as given (its caller closes it),
    or one opened from a path or URL (owned: the loader closes it; `remote`: open_dataset's
    URL options, those left None dropped). `accepted` names what the loader takes."""
    if isinstance(data, PackedDataset):
        return data, False
    if isinstance(data, (str, os.PathLike)):
        return open_dataset(data, **{k: v for k, v in remote.items() if v is not None}), True
    raise invalid_type("data", data, accepted)
