"""Which source reads a path (detected from it, or forced), opened through the source registry
(pack/sources/registry.py; every source registered in pack/sources/catalog.py): what pack(),
packdata and a shard task call, never asking which source it is."""

from __future__ import annotations

import os
from typing import TypedDict

from fastloader.pack.sources import catalog as _catalog  # noqa: F401 (registers every source)
from fastloader.pack.sources import registry
from fastloader.pack.sources.base import Listed
from fastloader.pack.sources.registry import Opened, Opening
from fastloader.pack.sources.types import Description, FieldKinds, Indexed, StorageOptions
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE

SOURCE_FORMATS = registry.names()


class OpenerArgs(TypedDict):
    """open_source's and reopen_description's keyword arguments, as pack() and packdata
    pass them on."""

    fields: FieldKinds | None
    image: str | None
    label: str | None
    root: str | os.PathLike[str] | None
    skip_empty: bool
    masks: bool


def detect(src: str | os.PathLike[str], forced: str | None) -> str:
    """The source kind of src: `forced` if given, else the first registered source that
    claims it (tar shards, a table by suffix, a folder by what it holds: folder_kind's rule,
    PackError when both readings fit); the ImageFolder tree, asked last, claims the rest."""
    return registry.detect(src, forced)


def fingerprint(kind: str, path: str, storage_options: StorageOptions | None = None) -> str:
    """The registered source's fingerprint of path (its files' names, sizes and mtimes; tars
    at URLs: sizes and ETags): a resumed pack must read the same source."""
    return registry.get(kind).fingerprint(path, storage_options)


def open_source(src: str | os.PathLike[str], kind: str, *, fields: FieldKinds | None,
                image: str | None, label: str | None, root: str | os.PathLike[str] | None,
                skip_empty: bool = False, masks: bool = False,
                storage_options: StorageOptions | None = None,
                max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> Opened:
    """(samples, field specs, source description with its fingerprint: the one its opener
    gave, else the source's) of a registered source; storage_options: fsspec's, for sources
    at URLs; max_file_size: the largest file a listed tree keeps."""
    source = registry.get(kind)
    opening = Opening(fields, image, label, root, skip_empty, masks, storage_options,
                      max_file_size)
    samples, specs, described = source.open(os.fspath(src), opening)
    if described.get("fingerprint"):
        return samples, specs, described
    return samples, specs, described | {
        "fingerprint": source.fingerprint(described["path"], storage_options)}


def reopen_description(src: str | os.PathLike[str], kind: str, *, fields: FieldKinds | None,
                       image: str | None, label: str | None,
                       root: str | os.PathLike[str] | None, skip_empty: bool,
                       masks: bool) -> Description | None:
    """How a shard task (a Ray task, `packdata shard`) opens this source again (the source's
    reopen: JSON of open_source's arguments with absolute paths; None when fields are not
    JSON, and the samples then travel to the tasks pickled)."""
    return registry.get(kind).reopen(src, Opening(fields, image, label, root, skip_empty,
                                                  masks))


def planned(description: Description, plan: Listed) -> Indexed | None:
    """The samples of a plan whose source keeps its listing in the plan (read from there);
    None: the source is opened again (reopened)."""
    return registry.get(description["kind"]).planned(plan)


def reopened(description: Description, storage_options: StorageOptions | None) -> Opened:
    """open_source of a plan's reopen description (a shard task's)."""
    return open_source(description["src"], description["kind"],
                       fields=description["fields"], image=description["image"],
                       label=description["label"], root=description["root"],
                       skip_empty=description["skip_empty"], masks=description["masks"],
                       storage_options=storage_options)
