"""The one packing pipeline: a source protocol and the driver every source goes through.

A PackSource (pipeline/samples.SampleSource: an importer's samples (an ImageFolder tree, local
or at a URL, a table, file groups, .tar shards, a COCO file ...) or Python samples) says how it
is planned into the staging (what it lists and its identity for resume, in plan.json) and how
its pending shards run on the engine; one commit joins the parts of any source (format v2,
the fields the source declares). drive() runs plan,
run and commit for every source, with one rule for a failure: a source that can be
recognised again keeps its staging for --resume once a shard has finished (and the error says
so); one that cannot (a plain iterable of Python samples, read once), or a failure before any
shard finished, leaves nothing behind. A full disk where the pack writes is a
PackDiskFullError (staging/space.py): refused before the pack starts when the plan's estimate
is clearly larger than the free space, else told when a write fails, with the same rule.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Protocol

from fastloader.errors import PackError
from fastloader.format.disk_space import is_no_space
from fastloader.format.manifest import Manifest
from fastloader.pack.pipeline.options import PackOptions
from fastloader.pack.staging import space
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
                ) -> tuple[ShardPlan | None, dict[str, object], dict[str, object] | None]:
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
    if isinstance(staging, Staging) and not options.skip_space_check:
        space.check_room(staging, plan, backend, options.codec, options.resume)
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
    except BaseException as exc:
        staging.release()
        if isinstance(staging, Staging) and is_no_space(exc):  # too full for the plan itself
            raise space.disk_full_error(staging, plan, backend, options.codec, False) from exc
        raise
    return staging, plan, TaskSettings.of(identity | (run or {}))


RESUME_HINT = "the finished shards are kept in the staging folder: rerun with resume=True " \
              "to reuse them"
_KEPT = "fastloader_staging_kept"  # drive's note on the exception a failed pack raised


def drive(source: PackSource, dst: str | os.PathLike[str], options: PackOptions) -> Manifest:
    """Pack source into dst: plan, run the pending shards, commit; on a failure the staging is
    kept for --resume when the source is resumable and a shard had finished (a PackError
    then says so), else removed (staging_kept tells which, from the exception)."""
    staging, plan, settings = plan_source(source, dst, options)
    try:
        done, trusted = source.run(staging, plan, settings, options)
        manifest = commit(staging, done, settings, options.overwrite, trusted=trusted)
    except PackError as exc:
        said = "resume=True" in str(exc)  # the error itself sends the user to the staging
        kept = _fail(staging, source.resumable and (said or _finished(staging)))
        setattr(exc, _KEPT, kept)
        if not kept or said or type(exc) is not PackError:
            raise
        raise _noted(PackError(f"{exc} ({RESUME_HINT})"), kept) from exc
    except BaseException as exc:  # a stop signal, a full disk, a bug: the same rule
        full = isinstance(staging, Staging) and space.disk_filled(
            exc, staging, plan, settings.backend, options.codec)
        kept = _fail(staging, source.resumable and _finished(staging))
        setattr(exc, _KEPT, kept)
        if not full:
            raise
        assert isinstance(staging, Staging)
        raise _noted(space.disk_full_error(staging, plan, settings.backend, options.codec,
                                           kept), kept) from exc
    staging.release()
    return manifest


def staging_kept(exc: BaseException) -> bool:
    """Whether the failed pack that raised exc kept finished shards for --resume (False for
    an exception that did not come through drive: nothing was staged then)."""
    return bool(getattr(exc, _KEPT, False))


def _noted(exc: PackError, kept: bool) -> PackError:
    setattr(exc, _KEPT, kept)
    return exc


def _finished(staging: AnyStaging) -> bool:
    """Whether some shard finished: its part committed to the staging's journal (its .json is
    written last), or the journal gone because the commit took every part (the staging holds
    the dataset, short of its rename); a URL's staging is judged kept (its parts live at the
    URL, not listed here)."""
    if isinstance(staging, RemoteStaging):
        return True
    return not staging.journal.is_dir() or any(staging.journal.glob("*.json"))


def _fail(staging: AnyStaging, keep: bool) -> bool:
    """Release the staging after a failure: kept for --resume, or removed (nothing half-made
    is left behind, and no hidden .DST.partial that a --resume would reuse none of); whether
    it was kept."""
    staging.release()
    if not keep:
        shutil.rmtree(staging.dir, ignore_errors=True)
    return keep
