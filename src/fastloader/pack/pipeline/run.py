"""The shard tasks of a planned pack run on the chosen engine, with the progress counted."""

from __future__ import annotations

from collections.abc import Callable

from fastloader.pack.engines.local import pending_shards
from fastloader.pack.engines.progress import Meter
from fastloader.pack.pipeline.options import PackOptions
from fastloader.pack.staging.journal import Staging
from fastloader.pack.staging.part import Stage
from fastloader.pack.staging.plan import Spans
from fastloader.pack.staging.remote_stage import RemoteStaging

Engine = Callable[[Stage, list[int], Meter], set[int]]  # (stage, todo, meter) -> written


def run_pending(staging: Staging | RemoteStaging, plan: Spans, options: PackOptions, *,
                local: Engine, ray: Engine) -> set[int]:
    """Run the shards whose parts are missing (all of them unless resuming) on
    options.engine; the shards whose parts need no second hash at the commit: written just
    now, or hashed by the resume check (a URL's are checked by size only)."""
    remote = isinstance(staging, RemoteStaging)
    todo = (staging.pending(plan, options.resume) if isinstance(staging, RemoteStaging)
            else pending_shards(staging.dir, plan, options.resume))
    stage: Stage = staging.stage if isinstance(staging, RemoteStaging) else staging.dir
    meter = Meter(plan, todo, options.progress, options.quiet)
    try:
        written = (ray if options.engine == "ray" else local)(stage, todo, meter)
    finally:
        meter.close()
    hashed = set() if remote else set(range(plan.num_shards)) - set(todo)
    return set(written) | hashed
