"""The shard plan: a source's items cut into shards by a rule of the items alone.

An ImageFolder tree (ShardPlan): shard k holds the files bounds[k]..bounds[k+1] of the sorted
listing: files are added while their source bytes fit in shard_size (at least one file a
shard) and at most MAX_SHARD_FILES. The listing and the bounds are kept as compact arrays (a
few dozen bytes a file, never a Python object per file).

A field source (SamplePlan): an importer's samples (a table, file groups, .tar shards, COCO)
are cut by the same rule over their size hints (pack/sources/hints.py); Python samples would
need their __getitem__ run on the driver for a hint, so they are cut by count alone: every
shard_samples samples (default: shard_size / 128 KiB). The plan keeps the source's
description, to reopen it in a shard task.

No rule looks at the workers, the engine or the machines, so the same source gives the same
shards, records, order and index arrays however it is packed. Both plans live in the staging
folder's plan/ folder, where every shard task (a pool worker, a Ray task, `packdata shard` on
another machine) reads its slice; load_plan reads whichever is there.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from fastloader.checks import int_at_least
from fastloader.errors import PackError
from fastloader.format.index import encode_paths
from fastloader.format.remote import is_url

PLAN_DIR = "plan"
PLAN_NAME = "plan.json"  # in the staging folder: the identity (backend, options)
SETTINGS_NAME = "settings.json"  # in plan/: what a run adds (skip_bad, overwrite)
MAX_SHARD_FILES = 1 << 16  # bounds a task's memory and time on tiny files
_ARRAYS = ("path_offsets", "path_bytes", "labels", "sizes", "mtimes", "bounds")
_SCAN_NAME = "scan.json"
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
    source: dict[str, Any] | None = None  # a field source's description (manifest options)
    fields: list[dict[str, Any]] | None = None  # a field source's specs' manifest entries
    shard_samples: int | None = None  # Python samples: cut by count
    overwrite: bool = False  # `packdata plan --overwrite`, for its commit
    token: str | None = None  # a URL DST's: this pack's plan, not another's
    storage_options: dict[str, Any] | None = None  # a URL's fsspec options (never saved)

    @classmethod
    def of(cls, raw: dict[str, Any]) -> TaskSettings:
        """The settings in a plan.json (+ settings.json) mapping; PackError if one is
        missing."""
        names = {f.name for f in dataclass_fields(cls)}
        try:
            return cls(**{k: v for k, v in raw.items() if k in names})
        except TypeError as exc:
            raise PackError(f"the shard plan's settings are incomplete ({exc}); run `packdata "
                            "plan SRC DST` again.") from None


class Spans(Protocol):
    """What checking parts, counting progress and running tasks read of a plan: ShardPlan's
    and SamplePlan's."""

    sizes: np.ndarray  # int64 (n,): the bytes a position weighs, for the progress
    bounds: np.ndarray  # int64 (shards + 1,): shard k is positions bounds[k]..bounds[k+1]

    @property
    def num_shards(self) -> int: ...

    def __len__(self) -> int: ...

    def span(self, k: int) -> tuple[int, int]: ...

    def digest(self, k: int) -> str: ...

    def relpath(self, i: int) -> str: ...

    def save(self, staging: Path) -> None: ...


@dataclass
class ShardPlan:
    """The listing (one entry per source file, sorted) and the shard bounds over it."""

    root: Path | str  # a str: the URL of a tree in object storage
    path_offsets: np.ndarray  # int64 (n + 1,): slices of path_bytes
    path_bytes: np.ndarray  # uint8: UTF-8 (surrogateescape) relative paths
    labels: np.ndarray  # int64 (n,)
    sizes: np.ndarray  # int64 (n,): source bytes (stat)
    mtimes: np.ndarray  # int64 (n,): st_mtime_ns, so a resume sees changed files
    bounds: np.ndarray  # int64 (shards + 1,)
    scan: dict[str, Any] = field(default_factory=dict)  # scan counts and refusals (stats)

    def __len__(self) -> int:
        return int(self.labels.size)

    @property
    def num_shards(self) -> int:
        return int(self.bounds.size) - 1

    def relpath(self, i: int) -> str:
        """The relative path of file i of the listing."""
        start, stop = int(self.path_offsets[i]), int(self.path_offsets[i + 1])
        return bytes(self.path_bytes[start:stop]).decode("utf-8", "surrogateescape")

    def source(self, i: int) -> str:
        """Where file i of the listing is read from: its path, or its URL."""
        if isinstance(self.root, str):
            return f"{self.root}/{self.relpath(i)}"
        return str(self.root / self.relpath(i))

    def span(self, k: int) -> tuple[int, int]:
        """Shard k's files: listing positions lo..hi (hi excluded)."""
        return int(self.bounds[k]), int(self.bounds[k + 1])

    def digest(self, k: int) -> str:
        """sha256 of shard k's files (paths, labels, sizes, mtimes): a part made from other
        files (the source changed since) is not reused."""
        lo, hi = self.span(k)
        digest = hashlib.sha256(f"{lo}:{hi}".encode())
        digest.update(self.path_bytes[self.path_offsets[lo] : self.path_offsets[hi]].tobytes())
        relative = self.path_offsets[lo : hi + 1] - self.path_offsets[lo]
        for array in (relative, self.labels[lo:hi], self.sizes[lo:hi], self.mtimes[lo:hi]):
            digest.update(np.ascontiguousarray(array, np.int64).tobytes())
        return digest.hexdigest()

    def paths_of(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, bytes) of the paths of these listing positions, gathered without strings
        (a block of positions at a time: the byte gather's int64 indices stay bounded)."""
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
        """Write the plan into staging/plan/ (arrays as .npy, scan counts as JSON)."""
        folder = staging / PLAN_DIR
        folder.mkdir(exist_ok=True)
        for name in _ARRAYS:
            with open(folder / f"{name}.npy", "wb") as handle:
                np.save(handle, getattr(self, name), allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
        scan = {"root": str(self.root), **self.scan}
        (folder / _SCAN_NAME).write_text(json.dumps(scan, sort_keys=True))

    @classmethod
    def load(cls, staging: Path, mmap: bool = True) -> ShardPlan:
        """The plan a `plan` step or a pack wrote into staging (arrays memory-mapped, or read
        into memory with mmap=False: for a plan folder that is deleted after loading)."""
        folder = staging / PLAN_DIR
        mode: Literal["r"] | None = "r" if mmap else None
        try:
            scan = json.loads((folder / _SCAN_NAME).read_text())
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode=mode, allow_pickle=False)
                      for name in _ARRAYS}
        except (OSError, ValueError) as exc:
            raise PackError(
                f"{staging} holds no readable shard plan ({exc}); run `packdata plan SRC DST` "
                "again."
            ) from None
        root = scan.pop("root")
        plan = cls(root if is_url(root) else Path(root), scan=scan, **arrays)
        if plan.bounds.size < 2 or plan.bounds[-1] != len(plan) or plan.bounds[0] != 0:
            raise PackError(f"the shard plan in {staging} is damaged; run `packdata plan SRC "
                            "DST` again.")
        return plan


def cut(sizes: np.ndarray, shard_size: int, max_files: int = MAX_SHARD_FILES) -> np.ndarray:
    """Shard bounds over files of these sizes: as many files as fit in shard_size source
    bytes (at least one), at most max_files; the same sizes always give the same bounds."""
    ends = np.cumsum(np.asarray(sizes, np.int64))
    bounds = [0]
    n = int(ends.size)
    while bounds[-1] < n:
        lo = bounds[-1]
        before = int(ends[lo - 1]) if lo else 0
        hi = int(np.searchsorted(ends, before + shard_size, side="right"))
        bounds.append(min(max(hi, lo + 1), lo + max_files, n))
    return np.asarray(bounds, np.int64)


def _listing_arrays(files: Any) -> tuple[np.ndarray, ...]:
    """(path_offsets, path_bytes, labels, sizes, mtimes) of a scan's files: a Listing's own
    arrays (pack/sources/listing.py; no Python object per file), else read file by file."""
    if hasattr(files, "path_offsets"):  # a Listing: its paths are already fsencoded bytes
        return (np.asarray(files.path_offsets, np.int64), np.asarray(files.path_bytes, np.uint8),
                np.asarray(files.labels, np.int64), np.asarray(files.sizes, np.int64),
                np.asarray(files.mtimes, np.int64))
    n = len(files)
    labels, sizes, mtimes = (np.empty(n, np.int64) for _ in range(3))
    for i, source in enumerate(files):
        labels[i], sizes[i], mtimes[i] = source.label, source.size, source.mtime_ns
    path_offsets, path_bytes = encode_paths([source.relpath for source in files])
    return path_offsets, path_bytes, labels, sizes, mtimes


def from_scan(result: Any, shard_size: int, max_files: int = MAX_SHARD_FILES) -> ShardPlan:
    """The plan of a scan's files (pack/scan.ScanResult): the listing as arrays, then cut.

    Reads the scan through a narrow interface only: a Listing's column arrays, or else
    len(files) and each file's relpath, label, size and mtime_ns, in their (sorted) order.
    """
    path_offsets, path_bytes, labels, sizes, mtimes = _listing_arrays(result.files)
    scan = {
        "classes": list(result.classes),
        "ignored_hidden": result.ignored_hidden,
        "ignored_non_image": result.ignored_non_image,
        "ignored_outside_classes": result.ignored_outside_classes,
        "empty_classes": list(result.empty_classes),
        "refused": [list(r) for r in result.refused],
    }
    return ShardPlan(result.root, path_offsets, path_bytes, labels, sizes, mtimes,
                     cut(sizes, shard_size, max_files), scan)


SAMPLE_BYTES = 128 << 10  # what a Python sample is assumed to weigh: shard_samples' default
_BOUNDS, _SIZES, _META = "sample_bounds.npy", "sample_sizes.npy", "samples.json"
_KEYS = "sample_keys.npy"


def same_identity(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether a staged plan.json (old) is one a resume may reuse parts of: equal to new, bar
    the whole-source fingerprint when both plans keep per-item keys (each part's digest then
    tells whether its own items changed)."""
    if old is None:
        return False
    if old.get("item_keys") and new.get("item_keys"):
        def bare(plan: dict[str, Any]) -> dict[str, Any]:
            source = {k: v for k, v in plan.get("source", {}).items() if k != "fingerprint"}
            return plan | {"source": source}

        return bare(old) == bare(new)
    return old == new


RESUME_LOG = logging.getLogger("fastloader.pack.resume")  # resume's decisions (packdata shows them)


def note_resume(dst: Any, old: dict[str, Any] | None, new: dict[str, Any], resume: bool
                ) -> None:
    """Say on RESUME_LOG why a resume starts from nothing: no staged pack, or one planned
    from another source or with other options (naming what differs), which is cleared."""
    if not resume:
        return
    if old is None:
        RESUME_LOG.warning("resume: no interrupted pack of %s to resume; packing from the "
                           "start", dst)
    elif not same_identity(old, new):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        RESUME_LOG.warning("resume: the interrupted pack of %s had another source or other "
                           "options (%s differ); starting over, its shards are cleared",
                           dst, ", ".join(keys))


def default_shard_samples(shard_size: int) -> int:
    """Samples per shard of Python samples when not given: shard_size / 128 KiB (at least 1)."""
    return max(1, shard_size // SAMPLE_BYTES)


def check_shard_samples(shard_samples: Any, shard_size: int) -> int:
    """shard_samples checked (None: its default from shard_size)."""
    if shard_samples is None:
        return default_shard_samples(shard_size)
    return int_at_least("shard_samples", shard_samples, 1,
                        "Pass the number of samples per shard, e.g. 2048.")


@dataclass
class SamplePlan:
    """Shard k holds samples bounds[k]..bounds[k+1]; sizes are their hints (zeros when cut by
    count); reopen describes an importer's source for a task to open it again (None: Python
    samples, handed to the tasks)."""

    bounds: np.ndarray  # int64 (shards + 1,)
    sizes: np.ndarray  # int64 (n,)
    fingerprint: str = ""  # the source's (importers.fingerprint); "" for Python samples
    reopen: dict[str, Any] | None = None
    fields: list[dict[str, Any]] = field(default_factory=list)  # the specs' manifest entries
    keys: np.ndarray | None = None  # uint8 (n, KEY_BYTES): each item's identity, or None

    def __len__(self) -> int:
        return int(self.bounds[-1])

    @property
    def num_shards(self) -> int:
        return int(self.bounds.size) - 1

    def span(self, k: int) -> tuple[int, int]:
        return int(self.bounds[k]), int(self.bounds[k + 1])

    def digest(self, k: int) -> str:
        """What shard k's part was made from (the source's fingerprint and its range): a part
        of another source or range is not reused."""
        lo, hi = self.span(k)
        if self.keys is not None:  # per item: a changed item invalidates its shard alone
            digest = hashlib.sha256(f"items:{lo}:{hi}".encode())
            digest.update(np.ascontiguousarray(self.keys[lo:hi]).tobytes())
            return digest.hexdigest()
        return hashlib.sha256(f"{self.fingerprint}:{lo}:{hi}".encode()).hexdigest()

    def relpath(self, i: int) -> str:
        """How a refusal names sample i."""
        return f"sample {i}"

    def save(self, staging: Path) -> None:
        folder = staging / PLAN_DIR
        folder.mkdir(exist_ok=True)
        for name, array in ((_BOUNDS, self.bounds), (_SIZES, self.sizes)):
            with open(folder / name, "wb") as handle:
                np.save(handle, array, allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
        keys = folder / _KEYS
        if self.keys is None:
            keys.unlink(missing_ok=True)
        else:
            with open(keys, "wb") as handle:
                np.save(handle, self.keys, allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
        meta = {"fingerprint": self.fingerprint, "reopen": self.reopen, "fields": self.fields}
        (folder / _META).write_text(json.dumps(meta, sort_keys=True))

    @classmethod
    def load(cls, staging: Path, mmap: bool = True) -> SamplePlan:
        """The plan a sample pack wrote into staging (see ShardPlan.load for mmap)."""
        folder = staging / PLAN_DIR
        mode: Literal["r"] | None = "r" if mmap else None
        try:
            meta = json.loads((folder / _META).read_text())
            bounds = np.load(folder / _BOUNDS, allow_pickle=False)
            sizes = np.load(folder / _SIZES, mmap_mode=mode, allow_pickle=False)
            keys = (np.load(folder / _KEYS, mmap_mode=mode, allow_pickle=False)
                    if (folder / _KEYS).is_file() else None)
        except (OSError, ValueError) as exc:
            raise PackError(f"{staging} holds no readable sample plan ({exc}); run `packdata "
                            "plan SRC DST` again.") from None
        plan = cls(bounds, sizes, meta["fingerprint"], meta["reopen"], meta["fields"], keys)
        if bounds.size < 1 or bounds[0] != 0 or np.any(np.diff(bounds) <= 0) or \
                sizes.size != bounds[-1] or (keys is not None and len(keys) != sizes.size):
            raise PackError(f"the sample plan in {staging} is damaged; run `packdata plan SRC "
                            "DST` again.")
        return plan


def is_sample_plan(staging: Path) -> bool:
    """Whether staging holds a sample pack's plan (not an ImageFolder one)."""
    return (staging / PLAN_DIR / _META).is_file()


def count_bounds(n: int, shard_samples: int) -> np.ndarray:
    """Every shard_samples samples (the last shard may be shorter)."""
    return np.append(np.arange(0, n, shard_samples, dtype=np.int64), np.int64(n))


def plan_samples(samples: Any, image: str, shard_size: int, shard_samples: int,
                 importer: bool) -> tuple[np.ndarray, np.ndarray]:
    """(bounds, sizes) of a sequence of samples: by size hints for an importer's, by count for
    Python samples."""
    from fastloader.pack.sources.hints import size_hints

    n = len(samples)
    if importer:
        sizes = size_hints(samples, image)
        return cut(sizes, shard_size, MAX_SHARD_FILES), sizes
    return count_bounds(n, shard_samples), np.zeros(n, np.int64)

@functools.lru_cache(maxsize=4)
def _cached_plan(staging: str, stamp: int) -> tuple[ShardPlan | SamplePlan, TaskSettings]:
    folder = Path(staging)
    if not is_sample_plan(folder):
        return ShardPlan.load(folder), read_settings(folder)
    try:
        settings = json.loads((folder / PLAN_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise PackError(f"{folder} holds no readable shard plan ({exc}); run `packdata plan "
                        "SRC DST` again.") from None
    return SamplePlan.load(folder), TaskSettings.of(settings)


def load_plan(staging: Path) -> tuple[ShardPlan | SamplePlan, TaskSettings]:
    """The plan in staging (an ImageFolder tree's or a field source's) and its settings
    (plan.json; a tree's with its run settings), cached while plan.json is unchanged."""
    try:
        stamp = (staging / PLAN_NAME).stat().st_mtime_ns
    except OSError:
        raise PackError(f"{staging} holds no shard plan; run `packdata plan SRC DST` "
                        "first.") from None
    return _cached_plan(str(staging), stamp)


def read_settings(staging: Path) -> TaskSettings:
    """The plan's identity (plan.json: backend, options) with the run settings
    (plan/settings.json: skip_bad, overwrite)."""
    try:
        settings = json.loads((staging / PLAN_NAME).read_text())
        settings |= json.loads((staging / PLAN_DIR / SETTINGS_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise PackError(f"{staging} holds no readable shard plan ({exc}); run `packdata plan "
                        "SRC DST` again.") from None
    return TaskSettings.of(settings)
