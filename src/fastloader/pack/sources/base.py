"""The item-level source contract: what the plan, the part builder and the engines read of any
source (an importer's samples, an ImageFolder tree's files among them; Python samples), never
asking which.

A source's items are positions 0..len-1 of its plan. Each one has a size hint (what the cut
and the progress weigh), a piece of `work` that travels to a worker (an index into a sequence
the forked workers inherit, or the sample itself) and a picklable `job` that turns that work
into a prepared record. The source says how its part's rows are kept (`rows`: the v2 columns
of its declared `fields`), what a task on another machine is handed (`handed`: Python samples
travel to the tasks; None when the task opens the source again itself, from the plan), and
each item's identity for resume (`keys`: what the item is made of, told without preparing it;
a part records its items' keys, and --resume reuses it only while they are the same). A
source whose keys can only be told by reading its items (Python samples) has its tasks
compute them as they prepare each item (`PartRows.keys`), so a pack reads it once. Items that
are cheapest read together by one worker (the cells of one Parquet row group, which a worker
decodes whole) say so through `locality`, and the local engine hands each such run to one
worker.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:
    from fastloader.pack.sources.tiling import TileColumns

# what one item's work is (a path, an index, a sample): the source's own, handed back to its job
Work = TypeVar("Work")
# what a job makes of one item (a Prepared record; a sample's record, values and key), kept by
# the part's rows
Ready = TypeVar("Ready")
ReadyIn = TypeVar("ReadyIn", contravariant=True)


class PartRows(Protocol[ReadyIn]):
    """What a part collects from its items' prepared records, in plan order."""

    data: list[bytes]  # the kept records' bytes, for the shard file
    skipped: list[list[str]]  # [name, reason] of each bad item skipped
    reencoded: int  # records re-encoded (max_side)
    tiles: TileColumns | None  # a tiled pack's tile columns
    # the items' keys as their tasks computed them while preparing (Python samples: each
    # item's job returns its key too), in order; None: the source tells them (keys())
    keys: bytearray | None

    def add(self, i: int, prepared: ReadyIn, skip_bad: bool) -> None:
        """Keep item i's prepared record, or (skip_bad) list it as skipped; PackError else."""
        ...

    def arrays(self, offsets: list[int]) -> dict[str, np.ndarray]:
        """The part's index arrays, its records at these shard offsets."""
        ...


class ItemSource(Protocol[Work, Ready]):
    """A source as its items: listed, sized, read and prepared one at a time."""

    window: int  # at most this many items in flight per pool window (bounds memory)

    def __len__(self) -> int: ...

    def size(self, i: int) -> int:
        """Item i's size hint in bytes (0 where unknown: Python samples)."""
        ...

    def keys(self, lo: int, hi: int) -> bytes:
        """The resume identity of items lo..hi: each one's key, in order, told here without
        preparing it (a tree's listing entry: path, label, size, mtime; an importer's key
        from its plan, or its source's fingerprint; a Python sample read again and keyed as
        its task keyed it). A finished part is reused only while its items' keys are equal.
        """
        ...

    def key_job(self) -> Callable[[Work], bytes] | None:
        """The picklable function from work(i) to item i's key where telling it means reading
        the item (Python samples), so a resume's check can read them on the pool; None where
        keys() reads only the plan."""
        ...

    def work(self, i: int) -> Work:
        """What a worker needs to prepare item i (picklable)."""
        ...

    def locality(self) -> Callable[[int], Hashable] | None:
        """Item i -> a key shared by the neighbouring items one worker reads cheapest
        together (the row group of a Parquet cell: a worker decodes a group's column whole);
        None where items are read one by one (files, tar members, Python samples)."""
        ...

    def job(self) -> Callable[[Work], Ready]:
        """The picklable function from work(i) to item i's prepared record."""
        ...

    def prepare(self, i: int) -> Ready:
        """Item i read and prepared here, in this process (a shard task's own loop)."""
        ...

    def inherited(self) -> AbstractContextManager[bool]:
        """While open, workers forked now inherit what work() refers to; yields whether the
        pool must fork for that (work by index) or may start workers any way."""
        ...

    def rows(self) -> PartRows[Ready]:
        """A new collector of one part's rows."""
        ...

    def handed(self) -> object:
        """What a task on another machine is handed (the samples, pickled); None when the
        task opens the source itself (a tree's listing, an importer's description, from the
        plan)."""
        ...


class ListedPlan(NamedTuple):
    """What the shard plan keeps of a source whose samples are a listing of files (an
    ImageFolder tree, sources/formats/image_folder.py), so its tasks read the samples from
    the plan and its commit names them by path: the listing's compact columns, its root, its
    counts (manifest stats; `refused`: [path, reason] of files listed in skipped.json) and
    the refusals that are data not packed (a pack stops at the first unless skip_bad)."""

    path_offsets: np.ndarray  # int64 (n + 1,)
    path_bytes: np.ndarray  # uint8, the relative paths' file-system bytes
    labels: np.ndarray  # int64 (n,)
    mtimes: np.ndarray  # int64 (n,)
    root: Path | str  # the folder, or its URL
    counts: dict[str, Any]
    bad: list[list[str]]


class Listed(Protocol):
    """A plan as a listed source reads its samples back from it (staging/plan.ShardPlan)."""

    sizes: np.ndarray
    path_offsets: np.ndarray | None
    path_bytes: np.ndarray | None
    labels: np.ndarray | None
    mtimes: np.ndarray | None
    root: Path | str | None

    @property
    def scan(self) -> Mapping[str, Any]: ...
