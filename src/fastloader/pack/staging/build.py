"""The part builder: one shard task of any source, from its items to its part.

A task prepares its items lo..hi in order (the ItemSource contract, pack/sources/base.py; a
plan's items from staging/items.items_of: a source's samples, an ImageFolder tree's files
among them), writes the shard file (part.write_shard), then journal/NNNNN.part.npz (the index
arrays its source's rows keep) and, last, its part-manifest. An importer's source is reopened
in the task from the plan's description (cached per process); Python samples are handed to
it. With a URL DST the task gets a remote_stage.RemoteStage: the part is built in a local
temporary folder, then uploaded.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastloader.errors import PackError
from fastloader.pack.sources import tiling
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.staging.items import items_of
from fastloader.pack.staging.journal import write_atomic
from fastloader.pack.staging.part import (
    Part,
    RemoteParts,
    Stage,
    part_path,
    save_arrays,
    span_digest,
    write_shard,
)
from fastloader.pack.staging.plan import Spans, TaskSettings, load_plan


def build_part(staging: Stage, plan: Spans, k: int, settings: TaskSettings,
               items: ItemSource, prepared: Iterable[object]) -> Part:
    """Write shard k from its items' prepared records (in plan order, kept by the source's
    rows), then its shard file, index arrays, tile columns and part-manifest (last); for a
    URL DST (remote_stage.RemoteStage) in a local temporary folder, then uploaded."""
    if not isinstance(staging, Path):
        return staging.build(k, lambda folder: build_part(folder, plan, k, settings, items,
                                                          prepared))
    lo, hi = plan.span(k)
    rows = items.rows()
    count = 0
    for i, item in zip(itertools.count(lo), prepared):
        rows.add(i, item, settings.skip_bad)
        count += 1
    if count != hi - lo:
        raise PackError(f"shard {k} expected items {lo}..{hi - 1} but got {count}: the "
                        "source changed length while it was packed; pack it again.")
    keys = items.keys(lo, hi) if rows.keys is None else bytes(rows.keys)
    part = Part(k, lo, hi, span_digest(lo, hi, keys), None, rows.skipped, rows.reencoded)
    offsets: list[int] = []
    if rows.data:
        part.info, offsets = write_shard(staging, k, lo, rows.data, settings.backend)
    part.arrays_sha256 = save_arrays(part_path(staging, k, ".part.npz"), rows.arrays(offsets))
    if rows.tiles is not None:
        part.tiles_sha256 = save_arrays(part_path(staging, k, tiling.SHARD_SUFFIX),
                                        rows.tiles.take())
    write_atomic(part_path(staging, k), part.to_json())
    return part


def _plan_of(stage: Stage) -> tuple[Any, TaskSettings]:  # a ShardPlan, never named here
    """The plan and settings a task reads: from the staging folder (cached while unchanged),
    or downloaded once per process for a URL DST."""
    return load_plan(stage) if isinstance(stage, Path) else stage.load_plan()


def run_shard(staging: str | os.PathLike[str] | RemoteParts, k: int,
              samples: object = None) -> dict[str, int]:
    """The task of shard k of any source, where the engine runs it (a pool's driver, a Ray
    task, `packdata shard`): read the plan, prepare its items one after another (an importer's
    samples from its source reopened or, a tree's, read back from the listing the plan keeps;
    or Python samples handed over), write the part (in the staging folder, or uploaded to a
    URL DST's). Returns {files, bytes, packed} for the progress."""
    folder: Stage = Path(staging) if isinstance(staging, (str, os.PathLike)) else staging
    plan, settings = _plan_of(folder)
    if not 0 <= k < plan.num_shards:  # (a RemoteStage's repr would show storage_options)
        where = folder if isinstance(folder, Path) else "the URL's staging"
        raise PackError(f"shard {k} is not in the plan of {where} (shards 0..."
                        f"{plan.num_shards - 1}).")
    lo, hi = plan.span(k)
    # a URL DST's stage hands its storage options (a URL source's too)
    items = items_of(plan, settings, samples)
    part = build_part(folder, plan, k, settings, items, (items.prepare(i) for i in range(lo, hi)))
    return {"files": hi - lo, "bytes": int(plan.sizes[lo:hi].sum()),
            "packed": 0 if part.info is None else part.info.count}
