"""The shard tasks of a planned pack run on the chosen engine (local processes or Ray) over
its items, with the progress counted: the same for every source."""

from __future__ import annotations

from fastloader.pack.engines.local import pending_shards, read_keys, run_local
from fastloader.pack.engines.progress import Meter, note_reused
from fastloader.pack.engines.ray import run_on_ray
from fastloader.pack.pipeline.options import PackOptions
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.staging.journal import Staging
from fastloader.pack.staging.part import Identity, Stage, identity, part_path, span_digest
from fastloader.pack.staging.plan import Spans, TaskSettings
from fastloader.pack.staging.remote_stage import RemoteStaging


def run_pending(staging: Staging | RemoteStaging, plan: Spans, items: ItemSource,
                settings: TaskSettings, options: PackOptions) -> set[int]:
    """Run the shards whose parts are missing, or were made from other items (all of them
    unless resuming) on options.engine; the shards whose parts the commit need not check
    again: written just now, or checked by the resume (hashed, or at a URL sized)."""
    assert options.workers is not None
    made_of = identity(items, plan)
    if options.resume and isinstance(staging, Staging):
        made_of = _read_ahead(staging, plan, items, options.workers, made_of)
    todo = (staging.pending(plan, options.resume, made_of)
            if isinstance(staging, RemoteStaging)
            else pending_shards(staging.dir, plan, options.resume, made_of))
    if options.resume:
        note_reused(plan, todo)
    stage: Stage = staging.stage if isinstance(staging, RemoteStaging) else staging.dir
    meter = Meter(plan, todo, options.progress, options.quiet)
    try:
        if options.engine == "ray":
            written = run_on_ray(stage, todo, items, options.workers, options.ray_address,
                                 meter)
        else:
            written = run_local(stage, plan, todo, items, settings, options.workers, meter)
    finally:
        meter.close()
    return set(written) | (set(range(plan.num_shards)) - set(todo))


def _read_ahead(staging: Staging, plan: Spans, items: ItemSource, workers: int,
                made_of: Identity) -> Identity:
    """made_of with the keys of the finished shards' items read ahead on the pool, where
    telling them means reading the items (engines/local.read_keys); the rest as before."""
    finished = [k for k in range(plan.num_shards) if part_path(staging.dir, k).is_file()]
    read = read_keys(items, plan, finished, workers)
    if not read:
        return made_of

    def digest(k: int) -> str:
        return span_digest(*plan.span(k), read[k]) if k in read else made_of(k)

    return digest
