"""Which source reads a path (detected from it, or forced), opened through the source registry
(pack/sources/registry.py; every source registered in pack/sources/catalog.py): what pack(),
packdata and a shard task call, never asking which source it is."""

from __future__ import annotations

import os
from typing import TypedDict

from fastloader.errors import PackError
from fastloader.pack.sources import catalog as _catalog  # noqa: F401 (registers every source)
from fastloader.pack.sources import registry
from fastloader.pack.sources.registry import Opened, Opening
from fastloader.pack.sources.types import Description, FieldKinds, StorageOptions

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
    PackError when both readings fit); else an ImageFolder tree."""
    return registry.detect(src, forced)


def refuse_table_options(kind: str, fields: FieldKinds | None, image: str | None,
                         label: str | None, root: str | os.PathLike[str] | None) -> None:
    """An ImageFolder tree takes none of the table and field options."""
    given = [f"{name}=" for name, value in (("fields", fields), ("image", image),
                                            ("label", label), ("root", root)) if value]
    if given:
        raise PackError(f"{', '.join(given)} do not apply to an ImageFolder tree (its classes "
                        'are its folders, its images the files); pass source_format="files" '
                        "if it is a folder of file groups.")


def fingerprint(kind: str, path: str, storage_options: StorageOptions | None = None) -> str:
    """The registered source's fingerprint of path (its files' names, sizes and mtimes; tars
    at URLs: sizes and ETags): a resumed pack must read the same source."""
    return registry.get(kind).fingerprint(path, storage_options)


def open_source(src: str | os.PathLike[str], kind: str, *, fields: FieldKinds | None,
                image: str | None, label: str | None, root: str | os.PathLike[str] | None,
                skip_empty: bool = False, masks: bool = False,
                storage_options: StorageOptions | None = None
                ) -> Opened:
    """(samples, field specs, source description with its fingerprint) of a registered
    source; storage_options: fsspec's, for .tar shards at URLs."""
    source = registry.get(kind)
    opening = Opening(fields, image, label, root, skip_empty, masks, storage_options)
    samples, specs, described = source.open(os.fspath(src), opening)
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


def reopened(description: Description, storage_options: StorageOptions | None) -> Opened:
    """open_source of a plan's reopen description (a shard task's)."""
    return open_source(description["src"], description["kind"],
                       fields=description["fields"], image=description["image"],
                       label=description["label"], root=description["root"],
                       skip_empty=description["skip_empty"], masks=description["masks"],
                       storage_options=storage_options)
