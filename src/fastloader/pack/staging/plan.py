"""The shard plan: any source's items cut into shards by a rule of the items alone.

One plan for every source (ShardPlan): shard k holds items bounds[k]..bounds[k+1], each item
weighing its size hint (sizes: what the cut and the progress count). Items are added while
their bytes fit in shard_size (at least one a shard) and at most MAX_SHARD_FILES. What a
source adds is kept beside the bounds as compact arrays, never a Python object per item:
- an importer's samples (a table, file groups, .tar shards, COCO, an ImageFolder tree): their
  item keys (what a resume compares, pack/sources/hints.item_keys) or the source's
  fingerprint, and how a task opens the source again (reopen); an importer whose samples are a
  listing of files (a tree) keeps the listing too (path bytes and offsets, labels, mtimes),
  with its root and counts, and its tasks read their samples back from it;
- Python samples: nothing more. Their __getitem__ would have to run on the driver for a size
  hint, so they are cut by count alone (every shard_samples samples, default shard_size /
  128 KiB), and their keys are computed by the tasks as they prepare them.

No rule looks at the workers, the engine or the machines, so the same source gives the same
shards, records, order and index arrays however it is packed. The plan lives in the staging
folder's plan/ folder (its arrays as .npy, the rest in meta.json), where every shard task (a
pool worker, a Ray task, `packdata shard` on another machine) and the commit read it.
"""

from __future__ import annotations

import functools
import json
import os
import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import (
    Any,
    Literal,
    Protocol,
    TypedDict,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import numpy as np

from fastloader.checks import int_at_least
from fastloader.errors import PackError
from fastloader.format.remote import is_url
from fastloader.pack.staging.journal import PLAN_DIR, PLAN_NAME, write_atomic

SETTINGS_NAME = "settings.json"  # in plan/: what a run adds (skip_bad, overwrite, token)
MAX_SHARD_FILES = 1 << 16  # bounds a task's memory and time on tiny files
SAMPLE_BYTES = 128 << 10  # what a Python sample is assumed to weigh: shard_samples' default
_META = "meta.json"
# the plan's arrays, each saved when present: per shard, per item, a tree's listing
_ARRAYS = ("bounds", "sizes", "path_offsets", "path_bytes", "labels", "mtimes", "keys")
_GATHER_BLOCK = 1 << 12  # paths gathered at a time by paths_of (~2 MB of int64 indices)


@dataclass(frozen=True)
class TaskSettings:
    """What a shard task and the commit read of a pack's settings, typed where they are read
    (plan.json with plan/settings.json on disk, or the driver's own): the rest of plan.json
    is identity only (what a resume compares)."""

    backend: str
    shard_size: int
    max_side: int | None
    quality: int
    max_file_size: int
    skip_bad: bool = False
    tiles: dict[str, int] | None = None  # {version, restart_mcus}, or None untiled
    codec: str = "jpeg"  # "coeffs": JPEG records encoded as coeffs records in the tasks
    source: dict[str, object] | None = None  # a field source's description (manifest options)
    fields: list[dict[str, object]] | None = None  # a field source's specs' manifest entries
    shard_samples: int | None = None  # Python samples: cut by count
    apply_exif_orientation: bool = False  # store each image's EXIF orientation, turned sizes
    overwrite: bool = False  # `packdata plan --overwrite`, for its commit
    token: str | None = None  # a URL DST's: this pack's plan, not another's
    storage_options: dict[str, Any] | None = None  # a URL's fsspec options (never saved)

    @classmethod
    def of(cls, raw: Mapping[str, object], where: str = "the shard plan") -> TaskSettings:
        """The settings in a plan.json (+ settings.json) mapping, checked: PackError naming
        where (the plan file) and the key when one is unknown, missing or of the wrong type,
        or when the plan is of another plan format version."""
        version = raw.get("plan_version", PLAN_VERSION)
        if version != PLAN_VERSION:
            raise PackError(f"{where} is of plan format {version!r}, this fastloader reads "
                            f"{PLAN_VERSION}; {REPLAN}")
        hints = _setting_types()
        for key, value in raw.items():
            expected = hints.get(key, IDENTITY_ONLY.get(key))
            if expected is None:
                raise PackError(f"{where} has an unknown setting {key!r}; {REPLAN}")
            if not _fits(value, expected):
                raise PackError(f"{where}: setting {key!r} is {value!r}, not "
                                f"{_type_name(expected)}; {REPLAN}")
        missing = [f.name for f in dataclass_fields(cls) if f.name not in raw
                   and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise PackError(f"{where} lacks the setting {missing[0]!r}; {REPLAN}")
        values: dict[str, Any] = {k: v for k, v in raw.items() if k in hints}  # checked: typed
        return cls(**values)


REPLAN = "run `packdata plan SRC DST` (or the pack) again to plan it anew."
PLAN_VERSION = 1  # plan.json's format; version 1 writes no plan_version key (as it always was)
# plan.json's entries that are identity only (what a resume compares), no task's setting
IDENTITY_ONLY: dict[str, object] = {"src": str, "classes": list[str], "shard_files": int,
                                    "item_keys": bool, "plan_version": int}


@functools.cache
def _setting_types() -> dict[str, object]:
    return dict(get_type_hints(TaskSettings))


def _type_name(hint: object) -> str:
    """int, not <class 'int'>; a generic or union as Python writes it."""
    return hint.__name__ if isinstance(hint, type) and not get_args(hint) else str(hint)


def _fits(value: object, hint: object) -> bool:
    """Whether a JSON value is of the type hint (str, int, bool, None, dict[...], list[...],
    unions of them); bool is no int here."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if origin is dict:
        return isinstance(value, dict) and all(
            isinstance(k, str) and _fits(v, args[1]) for k, v in value.items())
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


class ScanCounts(TypedDict, total=False):
    """A tree's scan, as the plan keeps it for the manifest's stats and skipped.json (an
    importer's plan has none of these keys)."""

    classes: list[str]
    ignored_hidden: int
    ignored_non_image: int
    ignored_outside_classes: int
    empty_classes: list[str]
    refused: list[list[str]]  # [relpath, reason]


class Spans(Protocol):
    """What checking parts, counting progress and running tasks read of a plan."""

    sizes: np.ndarray  # int64 (n,): the bytes a position weighs, for the progress
    bounds: np.ndarray  # int64 (shards + 1,): shard k is positions bounds[k]..bounds[k+1]

    @property
    def num_shards(self) -> int: ...

    def __len__(self) -> int: ...

    def span(self, k: int) -> tuple[int, int]: ...

    def relpath(self, i: int) -> str: ...

    def save(self, staging: Path) -> None: ...


@dataclass
class ShardPlan:
    """The shard bounds over a source's items, with what the source keeps per item (see the
    module docstring: a tree's listing, an importer's keys, nothing for Python samples)."""

    bounds: np.ndarray  # int64 (shards + 1,)
    sizes: np.ndarray  # int64 (n,): size hints (a tree's files' stat sizes; 0 by count)
    path_offsets: np.ndarray | None = None  # a tree: int64 (n + 1,), slices of path_bytes
    path_bytes: np.ndarray | None = None  # a tree: uint8 UTF-8 (surrogateescape) relpaths
    labels: np.ndarray | None = None  # a tree: int64 (n,)
    mtimes: np.ndarray | None = None  # a tree: int64 (n,) st_mtime_ns, so a resume sees edits
    keys: np.ndarray | None = None  # an importer: uint8 (n, KEY_BYTES) item identities
    root: Path | str | None = None  # a tree's folder, or its URL (a str)
    scan: ScanCounts = field(default_factory=lambda: ScanCounts())  # a tree's (else empty)
    fingerprint: str = ""  # an importer's (importers.fingerprint)
    reopen: dict[str, object] | None = None  # how a task opens an importer's source again
    fields: list[dict[str, object]] = field(default_factory=list)  # the specs' manifest entries

    def __len__(self) -> int:
        return int(self.sizes.size)

    @property
    def num_shards(self) -> int:
        return int(self.bounds.size) - 1

    @property
    def handed(self) -> bool:
        """Whether the items exist only in the pack that planned them (Python samples: no
        listing to read, no source to reopen), so a task must be handed them."""
        return self.path_offsets is None and self.reopen is None

    def span(self, k: int) -> tuple[int, int]:
        """Shard k's items: plan positions lo..hi (hi excluded)."""
        return int(self.bounds[k]), int(self.bounds[k + 1])

    def relpath(self, i: int) -> str:
        """How item i is named: a tree's file by its relative path, a sample by position."""
        if self.path_offsets is None or self.path_bytes is None:
            return f"sample {i}"
        start, stop = int(self.path_offsets[i]), int(self.path_offsets[i + 1])
        return bytes(self.path_bytes[start:stop]).decode("utf-8", "surrogateescape")

    def located(self, relpath: str) -> str:
        """Where a listed file is read from: its path under the root, or its URL."""
        if isinstance(self.root, str):
            return f"{self.root}/{relpath}"
        return str(Path(self.root or ".") / relpath)

    def paths_of(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, bytes) of the paths of these listing positions, gathered without strings
        (a block of positions at a time: the byte gather's int64 indices stay bounded)."""
        assert self.path_offsets is not None and self.path_bytes is not None
        starts = self.path_offsets[positions]
        lengths = self.path_offsets[positions + 1] - starts
        offsets = np.zeros(positions.size + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        out = np.empty(int(offsets[-1]), np.uint8)
        for lo in range(0, positions.size, _GATHER_BLOCK):
            hi = min(lo + _GATHER_BLOCK, positions.size)
            base, end = int(offsets[lo]), int(offsets[hi])
            where = np.repeat(starts[lo:hi] - offsets[lo:hi], lengths[lo:hi])
            where += np.arange(base, end, dtype=np.int64)
            out[base:end] = self.path_bytes[where]
        return offsets, out

    def save(self, staging: Path) -> None:
        """Write the plan into staging/plan/: each array present as .npy, then meta.json
        (naming them) last, atomically: a plan folder with a meta.json is whole."""
        folder = staging / PLAN_DIR
        folder.mkdir(exist_ok=True)
        present = [name for name in _ARRAYS if getattr(self, name) is not None]
        for name in present:
            with open(folder / f"{name}.npy", "wb") as handle:
                np.save(handle, getattr(self, name), allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
        meta = {"arrays": present, "root": None if self.root is None else str(self.root),
                "scan": self.scan, "fingerprint": self.fingerprint, "reopen": self.reopen,
                "fields": self.fields}
        write_atomic(folder / _META, json.dumps(meta, sort_keys=True))

    @classmethod
    def load(cls, staging: Path, mmap: bool = True) -> ShardPlan:
        """The plan a `plan` step or a pack wrote into staging (arrays memory-mapped, or read
        into memory with mmap=False: for a plan folder that is deleted after loading)."""
        folder = staging / PLAN_DIR
        mode: Literal["r"] | None = "r" if mmap else None
        try:
            meta = json.loads((folder / _META).read_text())
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode=mode, allow_pickle=False)
                      for name in meta["arrays"] if name in _ARRAYS}
            root = meta["root"]
            plan = cls(**arrays, root=root if root is None or is_url(root) else Path(root),
                       scan=meta["scan"], fingerprint=meta["fingerprint"],
                       reopen=meta["reopen"], fields=meta["fields"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PackError(f"{staging} holds no readable shard plan ({type(exc).__name__}: "
                            f"{exc}); run `packdata plan SRC DST` again.") from None
        if not plan.whole():
            raise PackError(f"the shard plan in {staging} is damaged; run `packdata plan SRC "
                            "DST` again.")
        return plan

    def whole(self) -> bool:
        """Whether the arrays agree: bounds rising from 0 to the item count, one entry per
        item in each per-item array."""
        n, bounds = len(self), self.bounds
        if bounds.ndim != 1 or bounds.size < 1 or bounds[0] != 0 or bounds[-1] != n or \
                np.any(np.diff(bounds) <= 0):
            return False
        per_item = [a for a in (self.labels, self.mtimes, self.keys) if a is not None]
        offsets = self.path_offsets
        return all(len(a) == n for a in per_item) and (offsets is None or offsets.size == n + 1)


def cut(sizes: np.ndarray, shard_size: int, max_files: int = MAX_SHARD_FILES) -> np.ndarray:
    """Shard bounds over items of these sizes: as many as fit in shard_size bytes (at least
    one), at most max_files; the same sizes always give the same bounds."""
    ends = np.cumsum(np.asarray(sizes, np.int64))
    bounds = [0]
    n = int(ends.size)
    while bounds[-1] < n:
        lo = bounds[-1]
        before = int(ends[lo - 1]) if lo else 0
        hi = int(np.searchsorted(ends, before + shard_size, side="right"))
        bounds.append(min(max(hi, lo + 1), lo + max_files, n))
    return np.asarray(bounds, np.int64)


def count_bounds(n: int, shard_samples: int) -> np.ndarray:
    """Every shard_samples samples (the last shard may be shorter)."""
    return np.append(np.arange(0, n, shard_samples, dtype=np.int64), np.int64(n))


def check_shard_samples(shard_samples: object, shard_size: int) -> int:
    """shard_samples checked (None: its default, shard_size / 128 KiB, at least 1)."""
    if shard_samples is None:
        return max(1, shard_size // SAMPLE_BYTES)
    return int_at_least("shard_samples", shard_samples, 1,
                        "Pass the number of samples per shard, e.g. 2048.")


@functools.lru_cache(maxsize=4)
def _cached_plan(staging: str, stamp: int) -> tuple[ShardPlan, TaskSettings]:
    folder = Path(staging)
    return ShardPlan.load(folder), read_settings(folder)


def load_plan(staging: Path) -> tuple[ShardPlan, TaskSettings]:
    """The plan in staging and its settings (plan.json with plan/settings.json), cached while
    plan.json is unchanged."""
    try:
        stamp = (staging / PLAN_NAME).stat().st_mtime_ns
    except OSError:
        raise PackError(f"{staging} holds no shard plan; run `packdata plan SRC DST` "
                        "first.") from None
    return _cached_plan(str(staging), stamp)


def read_settings(staging: Path) -> TaskSettings:
    """The plan's identity (plan.json: backend, options) with the run settings
    (plan/settings.json: skip_bad, overwrite, token; none written is none added)."""
    run = staging / PLAN_DIR / SETTINGS_NAME
    try:
        settings = json.loads((staging / PLAN_NAME).read_text())
        if run.is_file():
            settings |= json.loads(run.read_text())
    except (OSError, ValueError) as exc:
        raise PackError(f"{staging} holds no readable shard plan ({exc}); run `packdata plan "
                        "SRC DST` again.") from None
    return TaskSettings.of(settings, f"{staging / PLAN_NAME} (with {run.name})"
                           if run.is_file() else str(staging / PLAN_NAME))
