"""The two item sources (pack/sources/base.ItemSource) every plan's tasks read: an ImageFolder
tree's files (TreeItems, over a ShardPlan) and declared-field samples (SampleItems: an
importer's, reopened in a task from the plan's description, or Python samples handed over).

items_of is the one place that turns a plan into its items; the part builder (build.py) and
the engines (engines/) then read the ItemSource contract only. Each source keeps its own part
rows: a tree's v1 index columns (listing positions kept, records), a field source's v2 columns
(records with labels, paths, every other declared field encoded).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from fastloader.errors import PackError
from fastloader.format.columns import encode_column
from fastloader.format.fields import FieldSpec, label_field, primary_image, specs_from_manifest
from fastloader.format.index import encode_paths
from fastloader.pack.sources import tiling
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.sources.validate import Prepared, prepare
from fastloader.pack.sources.values import PreparedSample, prepare_sample
from fastloader.pack.staging.part import CORE
from fastloader.pack.staging.plan import SamplePlan, ShardPlan, TaskSettings

log = logging.getLogger(__name__)
_ARRAYS = ("kept", "offset", "length", "height", "width", "codec", "crc32")
_DTYPES = ("int64", "int64", "int64", "int32", "int32", "uint8", "uint32")
_CORE_DTYPES = ("int64", "int64", "int32", "int32", "uint8", "uint32", "int64")
# every source's bad item stops the pack unless skip_bad: the message says how to go on
BAD_ITEM_FIX = "fix it, or pass skip_bad=True to pack the rest and list what was skipped."
_SOURCE: Any = None  # the sequence being packed, inherited by forked workers


def is_sequence(samples: Any) -> bool:
    """Whether samples can be read by index (len + getitem), not a plain iterable."""
    return hasattr(samples, "__len__") and hasattr(samples, "__getitem__") and not isinstance(
        samples, (dict, str, bytes))


def prepare_job(settings: TaskSettings) -> Callable[[str], Prepared]:
    """The per-file work of this pack (read, check, maybe re-encode or tile), picklable."""
    if settings.tiles is not None:
        return functools.partial(
            tiling.prepare_tiled, max_side=settings.max_side, quality=settings.quality,
            restart_mcus=settings.tiles["restart_mcus"], max_file_size=settings.max_file_size,
            storage_options=settings.storage_options)
    return functools.partial(prepare, max_side=settings.max_side, quality=settings.quality,
                             max_file_size=settings.max_file_size,
                             storage_options=settings.storage_options)


class _FileRows:
    """What a tree's part collects from its files' prepared records, in listing order."""

    def __init__(self, plan: ShardPlan, tiled: bool) -> None:
        self.plan = plan
        self.data: list[bytes] = []
        self.kept: list[int] = []
        self.core: list[tuple[int, int, int, int, int]] = []
        self.skipped: list[list[str]] = []
        self.reencoded = 0
        self.tiles = tiling.TileColumns() if tiled else None

    def add(self, i: int, prepared: Any, skip_bad: bool) -> None:
        record: Prepared = prepared
        if record.data is None:
            if not skip_bad:
                raise PackError(f"{self.plan.source(i)}: {record.error}; {BAD_ITEM_FIX}")
            self.skipped.append([self.plan.relpath(i), record.error or "unknown error"])
            log.warning("pack: skipped %s: %s", self.skipped[-1][0], self.skipped[-1][1])
            return
        self.data.append(record.data)
        self.kept.append(i)
        self.core.append((len(record.data), record.height, record.width, record.codec,
                          record.crc32))
        self.reencoded += record.reencoded
        if self.tiles is not None:
            self.tiles.add(record)

    def arrays(self, offsets: list[int]) -> dict[str, Any]:
        columns: list[Any] = (list(zip(*self.core, strict=True)) if self.core
                              else [[] for _ in range(5)])
        return {name: np.asarray(values, dtype) for name, values, dtype in
                zip(_ARRAYS, [self.kept, offsets, *columns], _DTYPES, strict=True)}


class TreeItems:
    """An ImageFolder tree's files as items: each read by path (local or at a URL) in the
    worker; the v1 index columns in its parts."""

    window = 2048  # files in flight per pool window (with the engine's byte bound)

    def __init__(self, plan: ShardPlan, settings: TaskSettings) -> None:
        self.plan, self.settings = plan, settings

    def __len__(self) -> int:
        return len(self.plan)

    def size(self, i: int) -> int:
        return int(self.plan.sizes[i])

    def work(self, i: int) -> str:
        return self.plan.source(i)

    def job(self) -> Callable[[str], Prepared]:
        return self._job

    @functools.cached_property
    def _job(self) -> Callable[[str], Prepared]:
        return prepare_job(self.settings)  # once: prepare() runs it for every file

    def prepare(self, i: int) -> Prepared:
        return self._job(self.work(i))

    def inherited(self) -> contextlib.AbstractContextManager[bool]:
        return contextlib.nullcontext(False)  # a path travels as it is

    def rows(self) -> _FileRows:
        return _FileRows(self.plan, self.settings.tiles is not None)

    def describe(self) -> dict[str, Any] | None:
        return {"root": str(self.plan.root)}  # a task reads the listing from the plan

    def handed(self) -> Any:
        return None


def specs_of(fields: list[dict[str, Any]]) -> list[FieldSpec]:
    """The field specs of a plan's manifest entries."""
    return specs_from_manifest(fields, "the shard plan")


class _SampleRows:
    """What a part collects from its prepared samples, in order."""

    def __init__(self, specs: Sequence[FieldSpec], tiled: bool) -> None:
        self.records = primary_image(specs).name
        self.tiles = tiling.TileColumns() if tiled else None
        self.by_name = {s.name: s for s in specs}
        self.label = label_field(specs)
        self.data: list[bytes] = []
        self.core: list[tuple[int, ...]] = []
        self.paths: list[str] = []
        self.columns: dict[str, list[Any]] = {s.name: [] for s in specs
                                              if s.name != self.records}
        self.skipped: list[list[str]] = []
        self.reencoded = 0

    def add(self, i: int, prepared: Any, skip_bad: bool) -> None:
        sample: PreparedSample = prepared
        record = sample.record
        if record.data is None:
            if not skip_bad:
                raise PackError(f"{record.error}; {BAD_ITEM_FIX}")
            self.skipped.append([sample.path, record.error or "unknown error"])
            log.warning("pack: skipped %s: %s", sample.path, self.skipped[-1][1])
            return
        label = sample.values.get(self.label.name, 0) if self.label else 0
        self.data.append(record.data)
        self.core.append((len(record.data), record.height, record.width, record.codec,
                          record.crc32, int(label)))
        self.paths.append(sample.path)
        self.reencoded += record.reencoded
        if self.tiles is not None:
            self.tiles.add(record)
        for name, values in self.columns.items():
            values.append(sample.values[name])

    def arrays(self, offsets: list[int]) -> dict[str, Any]:
        core: list[Any] = (list(zip(*self.core, strict=True)) if self.core
                           else [[] for _ in range(6)])
        arrays = {name: np.asarray(values, dtype) for name, values, dtype in
                  zip(CORE, [offsets, *core], _CORE_DTYPES, strict=True)}
        arrays["path_offsets"], arrays["path_bytes"] = encode_paths(self.paths)
        for name, values in self.columns.items():
            arrays |= encode_column(self.by_name[name], values)
        return arrays


def prepare_item(sample: Any, specs: Sequence[FieldSpec], where: str,
                 settings: TaskSettings) -> PreparedSample:
    """One sample checked and converted (sources/values), its record then repacked as
    restart tiles when the pack is tiled (in the worker: the repack is the costly part)."""
    prepared = prepare_sample(sample, specs, where, settings)
    if settings.tiles is None or prepared.record.data is None:
        return prepared
    record = tiling.tile_record(prepared.record, settings.tiles["restart_mcus"])
    return prepared._replace(record=record)


def _read(samples: Any, i: int) -> Any:
    """Sample i, or the text of its __getitem__'s failure (any failure is this sample's)."""
    try:
        return samples[i]
    except Exception as exc:  # the user's __getitem__
        return f"<{type(exc).__name__}: {exc}>"


def sample_job(work: Any, specs: Sequence[FieldSpec], settings: TaskSettings
               ) -> PreparedSample:
    """work prepared: an index into the forked sequence (its __getitem__ runs here), or a
    (where, sample) pair."""
    if isinstance(work, int):
        return prepare_item(_read(_SOURCE, work), specs, f"sample {work}", settings)
    where, sample = work
    return prepare_item(sample, specs, where, settings)


class SampleItems:
    """Samples of declared fields as items: read by index (in forked workers, which inherit
    the sequence), or handed over as (where, sample) pairs; the v2 columns in its parts."""

    window = 1024  # samples in flight per pool window

    def __init__(self, samples: Any, specs: Sequence[FieldSpec], settings: TaskSettings,
                 sizes: np.ndarray | None = None, reopen: dict[str, Any] | None = None) -> None:
        self.samples, self.specs, self.settings = samples, specs, settings
        self.sizes, self.reopen = sizes, reopen
        # fork, explicitly (whatever the global default): workers inherit the sequence and
        # call its __getitem__; without fork, samples travel to the workers pickled, in order
        self.forked = is_sequence(samples) and "fork" in multiprocessing.get_all_start_methods()

    def __len__(self) -> int:
        return len(self.samples)

    def size(self, i: int) -> int:
        return 0 if self.sizes is None else int(self.sizes[i])

    def work(self, i: int) -> Any:
        return i if self.forked else (f"sample {i}", self.samples[i])

    def job(self) -> Callable[[Any], PreparedSample]:
        return functools.partial(sample_job, specs=self.specs, settings=self.settings)

    def prepare(self, i: int) -> PreparedSample:
        return prepare_item(_read(self.samples, i), self.specs, f"sample {i}", self.settings)

    @contextlib.contextmanager
    def inherited(self) -> Iterator[bool]:
        global _SOURCE
        _SOURCE = self.samples
        try:
            yield self.forked
        finally:  # a later pack's sequence is its own
            _SOURCE = None

    def rows(self) -> _SampleRows:
        return _SampleRows(self.specs, self.settings.tiles is not None)

    def describe(self) -> dict[str, Any] | None:
        return self.reopen

    def handed(self) -> Any:
        return self.samples if self.reopen is None else None


@functools.lru_cache(maxsize=2)
def _reopened(description: str, options: str) -> tuple[Any, str]:
    """An importer's samples opened again from the plan's description (one per process);
    options: the fsspec storage options of a source at a URL (JSON; never in the plan)."""
    from fastloader.pack.sources.importers import open_source

    raw = json.loads(description)
    samples, specs, source = open_source(
        raw["src"], raw["kind"], fields=raw["fields"], image=raw["image"], label=raw["label"],
        root=raw["root"], skip_empty=raw["skip_empty"], masks=raw["masks"],
        storage_options=json.loads(options) or None)
    if not is_sequence(samples):
        samples = list(samples)  # a streamed importer (tars): its samples, by index
    fields = json.dumps([s.to_json() for s in specs], sort_keys=True)
    return samples, fields + source["fingerprint"]


def reopen(plan: SamplePlan, storage_options: dict[str, Any] | None = None) -> Any:
    """The plan's importer samples; PackError if the source is not the one planned."""
    assert plan.reopen is not None
    options = json.dumps(storage_options or {}, sort_keys=True, default=str)
    samples, identity = _reopened(json.dumps(plan.reopen, sort_keys=True), options)
    if identity != json.dumps(plan.fields, sort_keys=True) + plan.fingerprint:
        raise PackError(f"{plan.reopen['src']} changed since its shard plan was made (its "
                        "files or fields differ); plan the pack again (rerun it, or `packdata "
                        "plan SRC DST`).")
    return samples


def items_of(plan: ShardPlan | SamplePlan, settings: TaskSettings,
             samples: Any = None) -> ItemSource:
    """The items of a plan: a tree's files, or its samples (handed over, or else its
    importer's source reopened with the settings' storage options)."""
    if isinstance(plan, ShardPlan):
        return TreeItems(plan, settings)
    if samples is None:
        samples = reopen(plan, settings.storage_options)
    return SampleItems(samples, specs_of(plan.fields), settings, plan.sizes, plan.reopen)
