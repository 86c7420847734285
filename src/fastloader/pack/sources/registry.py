"""The source registry: one Source per kind of source pack() and packdata read (a table, file
groups, .tar shards, a COCO file, a speech corpus ...), each in a module of its own under
pack/sources/formats/, and registered by one line in pack/sources/catalog.py.

A Source says whether a path is its kind (`detect`, asked in rank order; the first yes wins;
the ImageFolder tree is asked last and claims any path), opens it as samples (`open`), names
the files whose stats make the fingerprint a resumed pack compares (`files`, or `fingerprint`
itself for sources at URLs; or `open` gives it), and writes how a shard task opens it again
(`reopen`: the plan's JSON; or `planned`: its samples read back from the plan that keeps its
listing).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec
from fastloader.format.remote import is_url
from fastloader.pack.sources.base import Listed
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.types import (
    Description,
    FieldKinds,
    Indexed,
    Sample,
    StorageOptions,
)
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE


@dataclass(frozen=True)
class Opening:
    """What pack() and packdata pass on to a source's opener (each source refuses those it
    does not take, in pack()'s argument names)."""

    fields: FieldKinds | None = None
    image: str | None = None
    label: str | None = None
    root: str | os.PathLike[str] | None = None
    skip_empty: bool = False
    masks: bool = False
    storage_options: StorageOptions | None = None
    max_file_size: int = DEFAULT_MAX_FILE_SIZE  # a listed tree refuses larger files


# (samples, field specs, source description)
Opened = tuple[Iterable[Sample], list[FieldSpec], Description]


class Source:
    """One kind of source. Subclasses set `name` (its source_format) and `rank` (detection
    order: lower is asked first), and implement detect and open."""

    name = ""
    rank = 100

    def detect(self, probe: Probe) -> bool:
        """Whether the path is this source's kind."""
        raise NotImplementedError

    def open(self, src: str, opening: Opening) -> Opened:
        """(samples, field specs, source description with at least kind and path)."""
        raise NotImplementedError

    def files(self, path: str) -> list[Path]:
        """The files whose names, sizes and mtimes are the source's fingerprint."""
        return [Path(path)]

    def fingerprint(self, path: str, storage_options: StorageOptions | None) -> str:
        """sha256 of the source files' names, sizes and mtimes: a resumed pack must read the
        same source (a table's media files are not included: verify --decode checks them)."""
        stats = [(str(f), f.stat()) for f in self.files(path)]  # one stat a file
        entries = [[name, st.st_size, st.st_mtime_ns] for name, st in stats]
        return digest(entries)

    def planned(self, plan: Listed) -> Indexed | None:
        """The samples of a plan that keeps this source's listing (read from the plan, not
        the source); None: the task opens the source again (reopen)."""
        return None

    def reopen(self, src: str | os.PathLike[str], opening: Opening) -> Description | None:
        """How a shard task opens this source again: JSON of the opener's arguments with
        absolute paths; None when fields are not JSON (the samples then travel pickled). A URL
        stays as given; storage_options are never written (a task reads its own)."""
        text = os.fspath(src)
        root = opening.root
        description = {"src": text if is_url(text) else os.path.abspath(
                           os.path.expanduser(text)),
                       "kind": self.name, "fields": opening.fields, "image": opening.image,
                       "label": opening.label,
                       "root": None if root is None else os.path.abspath(
                           os.path.expanduser(os.fspath(root))),
                       "skip_empty": opening.skip_empty, "masks": opening.masks}
        try:
            return json.loads(json.dumps(description))  # tuples read back as lists, as stored
        except (TypeError, ValueError):
            return None


def digest(entries: Sequence[Sequence[object]]) -> str:
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


_SOURCES: dict[str, Source] = {}


def register(source: Source) -> Source:
    """Add a source (its name must be new); returned, so a module may keep it."""
    if not source.name or source.name in _SOURCES:
        raise ValueError(f"source name {source.name!r} is empty or taken")
    _SOURCES[source.name] = source
    return source


def unregister(name: str) -> None:
    """Remove a registered source (tests register their own for a while)."""
    _SOURCES.pop(name, None)


def names() -> tuple[str, ...]:
    """Every source_format, in registration order (the ImageFolder tree first)."""
    return tuple(_SOURCES)


def get(name: str) -> Source:
    """The registered source named `name`; PackError naming the choices."""
    if name not in _SOURCES:
        raise PackError(f"unknown source format {name!r}; choose one of "
                        f"{', '.join(names())}.")
    return _SOURCES[name]


def detect(src: str | os.PathLike[str], forced: str | None) -> str:
    """The source kind of src: `forced` if given (checked), else the first registered source,
    in rank order, that claims it (the ImageFolder tree, asked last, claims any: its scan
    says what is wrong)."""
    if forced is not None:
        get(forced)
        return forced
    probe = Probe(src)
    for source in sorted(_SOURCES.values(), key=lambda s: s.rank):
        if source.detect(probe):
            return source.name
    raise PackError(f"no source format reads {src}; force one with source_format= "
                    f"({', '.join(names())}).")
