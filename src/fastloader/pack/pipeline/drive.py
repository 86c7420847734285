"""The one packing pipeline: a source protocol and the driver every source goes through.

A PackSource (an ImageFolder tree, local or at a URL: pipeline/tree.TreeSource; a table, file
groups, .tar shards, a COCO file or Python samples: pipeline/samples.SampleSource) says how it
is planned into the staging (what it lists and its identity for resume, in plan.json) and how
its pending shards run on the engine; one commit joins the parts of any source (format v2
where the source declares fields, v1 for a tree's image + label records). drive() runs plan,
run and commit for every source, with one rule for a failure: a source that can be
recognised again keeps its staging for --resume (and the error says so); one that cannot (a
plain iterable of Python samples, read once) leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Protocol

from fastloader.errors import PackError
from fastloader.format.manifest import Manifest
from fastloader.pack.pipeline.options import PackOptions
from fastloader.pack.staging.commit import commit
from fastloader.pack.staging.journal import PLAN_DIR, Staging, write_atomic
from fastloader.pack.staging.plan import SETTINGS_NAME, ShardPlan, TaskSettings
from fastloader.pack.staging.remote_stage import RemoteStaging

AnyStaging = Staging | RemoteStaging


class PackSource(Protocol):
    """What the pipeline asks of a source (its items then follow sources/base.ItemSource)."""

    @property
    def resumable(self) -> bool:
        """Whether a later --resume can tell this source's finished parts (its identity)."""
        ...

    def open_staging(self, dst: str | os.PathLike[str], options: PackOptions
                     ) -> tuple[AnyStaging, str]:
        """dst's staging, checked against the source but not opened yet, and its backend."""
        ...

    def listing(self, staging: AnyStaging, backend: str, options: PackOptions
                ) -> tuple[ShardPlan | None, dict[str, Any], dict[str, Any] | None]:
        """List the source and cut it for this (unopened) staging: (its plan, None for a
        stream known once read; the identity plan.json keeps, what a resume compares; the run
        settings plan/settings.json keeps, None for none)."""
        ...

    def run(self, staging: AnyStaging, plan: ShardPlan | None, settings: TaskSettings,
            options: PackOptions) -> tuple[ShardPlan, set[int]]:
        """Run the pending shards on options.engine; the plan (a stream's, now known) and the
        shards whose parts need no second hash at the commit."""
        ...


def plan_source(source: PackSource, dst: str | os.PathLike[str], options: PackOptions
                ) -> tuple[AnyStaging, ShardPlan | None, TaskSettings]:
    """The one planning step of every source (a pack's, `packdata plan`'s): dst's staging
    checked, the source listed and cut, then the staging opened (locked on return; a URL's is
    remote) with the plan saved there (a URL's uploaded, for its tasks). Without resume, or
    when the identity differs from the staged plan's, the folder is cleared; resuming keeps
    the parts (each reused only if made from the same items). The caller releases the
    staging; the settings are what every shard task reads."""
    staging, backend = source.open_staging(dst, options)
    plan, identity, run = source.listing(staging, backend, options)
    try:
        if isinstance(staging, RemoteStaging):
            staging.open(identity, options.resume, options.overwrite)
        else:
            staging.open(identity, options.resume)
        if plan is not None:
            plan.save(staging.dir)
            if run is not None:
                write_atomic(staging.dir / PLAN_DIR / SETTINGS_NAME,
                             json.dumps(run, sort_keys=True))
            if isinstance(staging, RemoteStaging):  # the run settings: this pack's token
                staging.publish_plan(SETTINGS_NAME)
    except BaseException:
        staging.release()
        raise
    return staging, plan, TaskSettings.of(identity | (run or {}))


RESUME_HINT = "the finished shards are kept in the staging folder: rerun with resume=True " \
              "to reuse them"


def drive(source: PackSource, dst: str | os.PathLike[str], options: PackOptions) -> Manifest:
    """Pack source into dst: plan, run the pending shards, commit; on a failure the staging is
    kept for --resume when the source is resumable (a PackError then says so), else removed."""
    staging, plan, settings = plan_source(source, dst, options)
    try:
        done, trusted = source.run(staging, plan, settings, options)
        manifest = commit(staging, done, settings, options.overwrite, trusted=trusted)
    except PackError as exc:
        _fail(staging, source.resumable)
        if not source.resumable or "resume=True" in str(exc) or type(exc) is not PackError:
            raise
        raise PackError(f"{exc} ({RESUME_HINT})") from exc
    except BaseException:
        _fail(staging, source.resumable)
        raise
    staging.release()
    return manifest


def _fail(staging: AnyStaging, keep: bool) -> None:
    """Release the staging after a failure: kept for --resume, or removed."""
    staging.release()
    if not keep:  # nothing half-made is left behind
        shutil.rmtree(staging.dir, ignore_errors=True)
