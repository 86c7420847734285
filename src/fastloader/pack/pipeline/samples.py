"""Pack samples (dicts of field values) into a format v2 dataset: independent shard tasks.

The Python API (`fastloader.pack(samples, dst, fields=...)`) and every importer but the
ImageFolder one come here. The samples are cut into a shard plan by a rule of the samples alone
(pack/staging/sample_plan.py), each shard is one task writing its shard file and part
(pack/staging/sample_part.py; run by pack/engines/samples.py on forked processes or Ray), and the
commit step joins the parts (pack/staging/sample_commit.py). A URL DST is staged remotely
(staging/remote_stage.py), as an ImageFolder pack's is. The first image field becomes the records
(shards, as in v1); every other field becomes columns under index/ (format/columns.py). A bad
sample stops the pack with its reason (where, field, what), unless skip_bad, which packs the
rest and lists it.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec, parse_fields, primary_image
from fastloader.format.manifest import Manifest
from fastloader.format.remote import is_url
from fastloader.pack.engines import samples as sample_engines
from fastloader.pack.engines.local import Meter, pending_shards
from fastloader.pack.pipeline import tree as write_mod
from fastloader.pack.staging.part import SETTINGS_NAME
from fastloader.pack.staging.plan import MAX_SHARD_FILES, PLAN_DIR
from fastloader.pack.staging.remote_stage import RemoteStaging
from fastloader.pack.staging.sample_commit import commit_samples
from fastloader.pack.staging.sample_plan import (
    SamplePlan,
    check_shard_samples,
    count_bounds,
    plan_samples,
)

log = logging.getLogger(__name__)


def _identity(specs: list[FieldSpec], backend: str, source: dict[str, Any] | None,
              opts: dict[str, Any]) -> dict[str, Any]:
    """plan.json: what makes the parts (a resume reuses parts of the same identity only), and
    what a shard task reads as its settings."""
    identity = {"backend": backend, "fields": [s.to_json() for s in specs],
                "source": source or {"kind": "python"}, "shard_files": MAX_SHARD_FILES,
                **{name: opts[name] for name in ("shard_size", "max_side", "quality",
                                                 "max_file_size", "skip_bad")}}
    if source is None:  # Python samples are cut by count
        identity["shard_samples"] = opts["shard_samples"]
    return identity


def _open_staging(dst: str | Path, source: dict[str, Any] | None, opts: dict[str, Any],
                  storage_options: dict[str, Any] | None
                  ) -> tuple[write_mod.Staging | RemoteStaging, str]:
    """dst's staging, checked but not opened, and its backend: a folder beside a path DST, or
    the hidden prefix beside a URL DST (remote_stage.py: each shard task uploads its part)."""
    if is_url(dst):
        backend = write_mod.resolve_backend(str(dst), opts["format"])
        remote = RemoteStaging(str(dst), storage_options)
        remote.check_destination(opts["overwrite"])
        return remote, backend
    if storage_options is not None and not (source and is_url(str(source.get("path", "")))):
        raise PackError(f"storage_options applies to a URL SRC or DST (s3://..., gs://...), "
                        f"and neither the source nor the folder {dst} is one; drop it, or "
                        "pass the URL.")
    dst = Path(dst)
    backend = write_mod.resolve_backend(dst, opts["format"])
    src_path = Path(source["path"]).absolute() if source and "path" in source else Path("/-")
    write_mod._check_destination(dst, src_path, opts["overwrite"])
    return write_mod.Staging(dst), backend


def plan_sample_pack(samples: Any, dst: str | Path, specs: list[FieldSpec],
                     opts: dict[str, Any], source: dict[str, Any] | None,
                     reopen: dict[str, Any] | None,
                     storage_options: dict[str, Any] | None = None
                     ) -> tuple[Any, SamplePlan | None, dict[str, Any]]:
    """Open dst's staging (locked on return; a URL's is remote), cut the samples into a plan
    and save it there (a URL's uploaded, for its tasks). A plain iterable gets no plan yet
    (None): its bounds are known once it is read."""
    staging, backend = _open_staging(dst, source, opts, storage_options)
    settings = _identity(specs, backend, source, opts)
    if sample_engines.is_sequence(samples) and len(samples) == 0:
        raise PackError(f"no sample could be packed into {dst} (0 skipped): the source has no "
                        "samples.")
    try:
        if isinstance(staging, RemoteStaging):
            staging.open(settings, opts["resume"], opts["overwrite"])
        else:
            staging.open(settings, opts["resume"])  # same source (its fingerprint) and options
        if not sample_engines.is_sequence(samples):
            return staging, None, settings
        image = primary_image(specs).name
        bounds, sizes = plan_samples(samples, image, settings["shard_size"],
                                     opts["shard_samples"], source is not None)
        plan = SamplePlan(bounds, sizes, (source or {}).get("fingerprint", ""), reopen,
                          settings["fields"])
        plan.save(staging.dir)
        if isinstance(staging, RemoteStaging):  # the run settings: this pack's token
            (staging.dir / PLAN_DIR / SETTINGS_NAME).write_text("{}")
            staging.publish_plan(SETTINGS_NAME)
    except BaseException:
        staging.release()
        raise
    return staging, plan, settings


def pack_options(specs: list[FieldSpec], source: dict[str, Any] | None, *,
                 format: str | None = None, shard_size: int = write_mod.DEFAULT_SHARD_SIZE,
                 workers: int | None = None, max_side: int | None = None, quality: int = 90,
                 overwrite: bool = False, skip_bad: bool = False,
                 max_file_size: int = write_mod.DEFAULT_MAX_FILE_SIZE, resume: bool = False,
                 shard_samples: int | None = None) -> dict[str, Any]:
    """A sample pack's options, checked (shard_samples: Python samples only)."""
    shard_size, workers, max_side, quality = write_mod._check_options(shard_size, workers,
                                                                      max_side, quality)
    if source is not None and shard_samples is not None:
        raise PackError("shard_samples applies to Python samples only; an importer's samples "
                        "are cut by their size (shard_size).")
    return {"format": format, "shard_size": shard_size, "workers": workers,
            "max_side": max_side, "quality": quality, "overwrite": overwrite,
            "skip_bad": skip_bad, "max_file_size": max_file_size, "resume": resume,
            "shard_samples": check_shard_samples(shard_samples, shard_size)}


def pack_samples(samples: Any, dst: str | os.PathLike[str], fields: Any, *,
                 format: str | None = None,
                 shard_size: int = write_mod.DEFAULT_SHARD_SIZE, workers: int | None = None,
                 max_side: int | None = None, quality: int = 90, overwrite: bool = False,
                 skip_bad: bool = False, quiet: bool = True, progress: Any = None,
                 max_file_size: int = write_mod.DEFAULT_MAX_FILE_SIZE,
                 source: dict[str, Any] | None = None, resume: bool = False,
                 engine: str = "local", ray_address: str | None = None,
                 shard_samples: int | None = None, reopen: dict[str, Any] | None = None,
                 storage_options: dict[str, Any] | None = None) -> Manifest:
    """Pack samples into dst as a format v2 dataset (see fastloader.pack for the arguments).

    `fields` is a dict (parsed here) or a list of FieldSpecs (from an importer); `source`
    describes where an importer read from, kept in the manifest's options; with its
    `fingerprint` (the source files' names, sizes and mtimes) resume=True reuses the parts
    an interrupted pack of the same source and options finished. `reopen` is how a shard task
    opens the importer's source again (engine="ray", `packdata shard`). A URL dst (with
    fsspec's storage_options) is staged remotely: every task uploads its own part.
    """
    if resume and not (source and source.get("fingerprint")):
        raise PackError("resume=True needs a source that can be recognised again (a table, "
                        "file groups or .tar shards); Python samples are packed from the start.")
    write_mod._check_engine(engine, ray_address)
    specs = fields if isinstance(fields, list) else parse_fields(fields)
    opts = pack_options(specs, source, format=format, shard_size=shard_size, workers=workers,
                        max_side=max_side, quality=quality, overwrite=overwrite,
                        skip_bad=skip_bad, max_file_size=max_file_size, resume=resume,
                        shard_samples=shard_samples)
    if engine == "ray" and not sample_engines.is_sequence(samples):
        raise PackError("engine='ray' needs samples it can read by index (a sequence or a "
                        "map-style dataset: len() and [i]); pack this iterable with "
                        "engine='local', or pass list(samples).")
    target = str(dst) if is_url(dst) else Path(dst).expanduser().absolute()
    staging, plan, settings = plan_sample_pack(samples, target, specs, opts, source, reopen,
                                               storage_options)
    finished = interrupted = False
    try:
        manifest = _run(staging, plan, samples, specs, settings, opts,
                        (engine, ray_address, progress, quiet))
        finished = True
    except (KeyboardInterrupt, OSError):
        interrupted = source is not None  # kept for resume=True; a bad input is not resumable
        raise
    finally:
        staging.release()
        if not finished and not interrupted:  # nothing half-made is left behind
            shutil.rmtree(staging.dir, ignore_errors=True)
    return manifest


def _run(staging: Any, plan: SamplePlan | None, samples: Any, specs: list[FieldSpec],
         settings: dict[str, Any], opts: dict[str, Any], how: tuple[Any, ...]) -> Manifest:
    """Run the pending shard tasks on the engine, then commit."""
    engine, ray_address, progress, quiet = how
    run = settings | {"workers": opts["workers"]}
    remote = isinstance(staging, RemoteStaging)
    stage = staging.stage if remote else staging.dir
    if plan is None:  # a plain iterable: read in order here, a part every shard_samples
        plan = SamplePlan(count_bounds(0, 1), count_bounds(0, 1)[1:], "", None,
                          settings["fields"])
        meter = Meter(plan, [], progress, quiet)
        try:
            sample_engines.run_stream(stage, plan, samples, specs, run,
                                      opts["shard_samples"], meter)
        finally:
            meter.close()
        return commit_samples(staging, plan, specs, settings, opts["overwrite"],
                              trusted=range(plan.num_shards))
    todo = (staging.pending(plan, opts["resume"]) if remote
            else pending_shards(staging.dir, plan, opts["resume"]))
    meter = Meter(plan, todo, progress, quiet)
    try:
        if engine == "ray":
            written = sample_engines.run_on_ray(stage, plan, todo, samples,
                                                opts["workers"], ray_address, meter)
        else:
            written = sample_engines.run_local(stage, plan, todo, samples, specs, run,
                                               meter)
    finally:
        meter.close()
    # pending_shards hashed these just now (a URL's shards are checked by size only)
    hashed = set() if remote else set(range(plan.num_shards)) - set(todo)
    return commit_samples(staging, plan, specs, settings, opts["overwrite"],
                          trusted=set(written) | hashed)
