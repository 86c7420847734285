"""The part builder: one shard task of any source, from its items to its part.

A task prepares its items lo..hi in order (an ImageFolder tree's files: pack/sources/validate
or tiling; a field source's samples: pack/sources/values), writes the shard file
(part.write_shard), then journal/NNNNN.part.npz (its index arrays; a field source's also its
own encoded columns, format/columns.encode_column) and, last, its part-manifest. A field
source (an importer) is reopened in the task from the plan's description (cached per
process); Python samples are handed to it. With a URL DST the task gets a
remote_stage.RemoteStage: the part is built in a local temporary folder, then uploaded.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.errors import PackError
from fastloader.format.columns import encode_column
from fastloader.format.fields import FieldSpec, label_field, primary_image, specs_from_manifest
from fastloader.format.index import encode_paths
from fastloader.pack.sources import tiling
from fastloader.pack.sources.validate import Prepared, prepare
from fastloader.pack.sources.values import PreparedSample, prepare_sample
from fastloader.pack.staging.journal import write_atomic
from fastloader.pack.staging.part import (
    CORE,
    Part,
    RemoteParts,
    Stage,
    part_path,
    save_arrays,
    write_shard,
)
from fastloader.pack.staging.plan import SamplePlan, ShardPlan, Spans, TaskSettings, load_plan

log = logging.getLogger(__name__)
_ARRAYS = ("kept", "offset", "length", "height", "width", "codec", "crc32")
_DTYPES = ("int64", "int64", "int64", "int32", "int32", "uint8", "uint32")
_CORE_DTYPES = ("int64", "int64", "int32", "int32", "uint8", "uint32", "int64")
# every source's bad item stops the pack unless skip_bad: the message says how to go on
BAD_ITEM_FIX = ("fix it, or pass --skip-bad (skip_bad=True) to pack the rest and list what "
                "was skipped.")


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

    def add(self, i: int, record: Prepared, skip_bad: bool) -> None:
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

    def arrays(self, offsets: list[int]) -> dict[str, np.ndarray]:
        columns: list[Any] = (list(zip(*self.core, strict=True)) if self.core
                              else [[] for _ in range(5)])
        return {name: np.asarray(values, dtype) for name, values, dtype in
                zip(_ARRAYS, [self.kept, offsets, *columns], _DTYPES, strict=True)}


def _write_part(staging: Path, plan: Spans, k: int, rows: Any, items: Iterable[Any],
                settings: TaskSettings) -> Part:
    """The one part writer: shard k's items (in plan order) through rows (_FileRows or
    _SampleRows), then its shard file, index arrays, tile columns and part-manifest (last)."""
    lo, hi = plan.span(k)
    count = 0
    for i, item in zip(itertools.count(lo), items):
        rows.add(i, item, settings.skip_bad)
        count += 1
    if count != hi - lo:
        raise PackError(f"shard {k} expected items {lo}..{hi - 1} but got {count}: the "
                        "source changed length while it was packed; pack it again.")
    part = Part(k, lo, hi, plan.digest(k), None, rows.skipped, rows.reencoded)
    offsets: list[int] = []
    if rows.data:
        part.info, offsets = write_shard(staging, k, lo, rows.data, settings.backend)
    part.arrays_sha256 = save_arrays(part_path(staging, k, ".part.npz"), rows.arrays(offsets))
    if rows.tiles is not None:
        part.tiles_sha256 = save_arrays(part_path(staging, k, tiling.SHARD_SUFFIX),
                                        rows.tiles.take())
    write_atomic(part_path(staging, k), part.to_json())
    return part


def build_part(staging: Stage, plan: ShardPlan, k: int, settings: TaskSettings,
               prepared: Iterable[Prepared]) -> Part:
    """Write shard k from its files' prepared records (in listing order), then its part."""
    if not isinstance(staging, Path):  # built in a local folder, then uploaded
        return staging.build(k, lambda folder: build_part(folder, plan, k, settings, prepared))
    rows = _FileRows(plan, settings.tiles is not None)
    return _write_part(staging, plan, k, rows, prepared, settings)


def _plan_of(stage: Stage) -> tuple[Any, TaskSettings]:
    """The plan and settings a task reads: from the staging folder (cached while unchanged),
    or downloaded once per process for a URL DST."""
    return load_plan(stage) if isinstance(stage, Path) else stage.load_plan()


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

    def add(self, i: int, prepared: PreparedSample, skip_bad: bool) -> None:
        record = prepared.record
        if record.data is None:
            if not skip_bad:
                raise PackError(f"{record.error}; {BAD_ITEM_FIX}")
            self.skipped.append([prepared.path, record.error or "unknown error"])
            log.warning("pack: skipped %s: %s", prepared.path, self.skipped[-1][1])
            return
        label = prepared.values.get(self.label.name, 0) if self.label else 0
        self.data.append(record.data)
        self.core.append((len(record.data), record.height, record.width, record.codec,
                          record.crc32, int(label)))
        self.paths.append(prepared.path)
        self.reencoded += record.reencoded
        if self.tiles is not None:
            self.tiles.add(record)
        for name, values in self.columns.items():
            values.append(prepared.values[name])

    def arrays(self, offsets: list[int]) -> dict[str, Any]:
        core: list[Any] = (list(zip(*self.core, strict=True)) if self.core
                           else [[] for _ in range(6)])
        arrays = {name: np.asarray(values, dtype) for name, values, dtype in
                  zip(CORE, [offsets, *core], _CORE_DTYPES, strict=True)}
        arrays["path_offsets"], arrays["path_bytes"] = encode_paths(self.paths)
        for name, values in self.columns.items():
            arrays |= encode_column(self.by_name[name], values)
        return arrays


def build_sample_part(staging: Stage, plan: SamplePlan, k: int, specs: Sequence[FieldSpec],
                      settings: TaskSettings, prepared: Iterable[PreparedSample]) -> Part:
    """Write shard k from its samples' prepared values (in order), then its part; for a URL
    DST (remote_stage.RemoteStage) in a local temporary folder, then uploaded."""
    if not isinstance(staging, Path):
        return staging.build(k, lambda folder: build_sample_part(folder, plan, k, specs,
                                                                 settings, prepared))
    rows = _SampleRows(specs, settings.tiles is not None)
    return _write_part(staging, plan, k, rows, prepared, settings)


def prepare_range(samples: Any, lo: int, hi: int, specs: Sequence[FieldSpec],
                  settings: TaskSettings) -> Iterable[PreparedSample]:
    """Samples lo..hi read by index and prepared, one after another (in a task)."""
    for i in range(lo, hi):
        where = f"sample {i}"
        try:
            sample = samples[i]
        except Exception as exc:  # the user's __getitem__: any failure is this sample's
            sample = f"<{type(exc).__name__}: {exc}>"
        yield prepare_item(sample, specs, where, settings)


def prepare_item(sample: Any, specs: Sequence[FieldSpec], where: str,
                 settings: TaskSettings) -> PreparedSample:
    """One sample checked and converted (sources/values), its record then repacked as
    restart tiles when the pack is tiled (in the worker: the repack is the costly part)."""
    prepared = prepare_sample(sample, specs, where, settings)
    if settings.tiles is None or prepared.record.data is None:
        return prepared
    record = tiling.tile_record(prepared.record, settings.tiles["restart_mcus"])
    return prepared._replace(record=record)


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
    if not (hasattr(samples, "__len__") and hasattr(samples, "__getitem__")):
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


def run_shard(staging: str | os.PathLike[str] | RemoteParts, k: int,
              samples: Any = None) -> dict[str, int]:
    """The task of shard k of any source, where the engine runs it (a pool's driver, a Ray
    task, `packdata shard`): read the plan, prepare its items one after another (a tree's
    files by path; an importer's samples from its source reopened, or Python samples handed
    over), write the part (in the staging folder, or uploaded to a URL DST's). Returns
    {files, bytes, packed} for the progress."""
    folder: Stage = Path(staging) if isinstance(staging, (str, os.PathLike)) else staging
    plan, settings = _plan_of(folder)
    if not 0 <= k < plan.num_shards:  # (a RemoteStage's repr would show storage_options)
        where = folder if isinstance(folder, Path) else "the URL's staging"
        raise PackError(f"shard {k} is not in the plan of {where} (shards 0..."
                        f"{plan.num_shards - 1}).")
    lo, hi = plan.span(k)
    if isinstance(plan, ShardPlan):
        job = prepare_job(settings)
        part = build_part(folder, plan, k, settings, (job(plan.source(i)) for i in range(lo, hi)))
    else:
        if samples is None:  # a URL DST's stage hands its storage options (a URL source's too)
            samples = reopen(plan, settings.storage_options)
        specs = specs_of(plan.fields)
        part = build_sample_part(folder, plan, k, specs, settings,
                                 prepare_range(samples, lo, hi, specs, settings))
    return {"files": hi - lo, "bytes": int(plan.sizes[lo:hi].sum()),
            "packed": 0 if part.info is None else part.info.count}
