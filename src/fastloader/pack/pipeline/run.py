"""The shard tasks of a planned pack run on the chosen engine (local processes or Ray) over
its items, with the progress counted: the same for every source."""

from __future__ import annotations

from fastloader.pack.engines.local import pending_shards, run_local
from fastloader.pack.engines.progress import Meter, note_reused
from fastloader.pack.engines.ray import run_on_ray
from fastloader.pack.pipeline.options import PackOptions
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.staging.journal import Staging
from fastloader.pack.staging.part import Stage
from fastloader.pack.staging.plan import Spans, TaskSettings
from fastloader.pack.staging.remote_stage import RemoteStaging


def run_pending(staging: Staging | RemoteStaging, plan: Spans, items: ItemSource,
                settings: TaskSettings, options: PackOptions) -> set[int]:
    """Run the shards whose parts are missing (all of them unless resuming) on
    options.engine; the shards whose parts need no second hash at the commit: written just
    now, or hashed by the resume check (a URL's are checked by size only)."""
    assert options.workers is not None
    remote = isinstance(staging, RemoteStaging)
    todo = (staging.pending(plan, options.resume) if isinstance(staging, RemoteStaging)
            else pending_shards(staging.dir, plan, options.resume))
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
    hashed = set() if remote else set(range(plan.num_shards)) - set(todo)
    return set(written) | hashed
