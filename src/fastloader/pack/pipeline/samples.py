"""Pack samples (dicts of field values) into a format v2 dataset: independent shard tasks.

The Python API (`fastloader.pack(samples, dst, fields=...)`) and every importer (the
ImageFolder tree's too: {image, label} samples over its listing) come here. The samples are
cut into a shard plan by a rule of the samples alone (staging/plan.py), each shard is one
task writing its shard file and part (staging/build.py; run by engines/ on forked processes
or Ray), and the commit step joins the parts (staging/commit.py). A URL DST is staged
remotely (staging/remote_stage.py). The first image field becomes the records (shards); every
other field becomes columns under index/ (format/columns.py). A bad sample stops the pack
with its reason (where, field, what), unless skip_bad, which packs the rest and lists it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec, parse_fields, primary_image
from fastloader.format.manifest import Manifest
from fastloader.format.remote import is_url
from fastloader.pack.pipeline.drive import drive
from fastloader.pack.pipeline.options import (
    PackOptions,
    check_destination,
    refuse_inside,
    resolve_backend,
)
from fastloader.pack.pipeline.run import run_pending
from fastloader.pack.sources.base import ListedPlan
from fastloader.pack.sources.hints import sizes_and_keys
from fastloader.pack.staging.items import (
    BAD_ITEM_FIX,
    Indexable,
    SampleItems,
    file_fields,
    is_sequence,
)
from fastloader.pack.staging.journal import Staging
from fastloader.pack.staging.plan import (
    MAX_SHARD_FILES,
    ScanCounts,
    ShardPlan,
    TaskSettings,
    check_shard_samples,
    count_bounds,
    cut,
)
from fastloader.pack.staging.remote_stage import RemoteStaging

log = logging.getLogger(__name__)


def _identity(specs: list[FieldSpec], backend: str, source: dict[str, object] | None,
              options: PackOptions) -> dict[str, object]:
    """plan.json: what makes the parts (a resume reuses parts of the same identity only), and
    what a shard task reads as its settings."""
    identity = {"backend": backend, "fields": [s.to_json() for s in specs],
                "source": source or {"kind": "python"}, "shard_files": MAX_SHARD_FILES,
                "skip_bad": options.skip_bad}
    if source is None:  # Python samples are cut by count
        identity["shard_samples"] = options.shard_samples
    return identity | options.plan_entries()


def _open_staging(dst: str | Path, source: dict[str, object] | None, options: PackOptions
                  ) -> tuple[Staging | RemoteStaging, str]:
    """dst's staging, checked but not opened, and its backend: a folder beside a path DST, or
    the hidden prefix beside a URL DST (remote_stage.py: each shard task uploads its part)."""
    src = str((source or {}).get("path", ""))
    if is_url(dst):
        backend = resolve_backend(str(dst), options.format)
        if src:
            refuse_inside(src, dst)
        remote = RemoteStaging(str(dst), options.storage_options)
        remote.check_destination(options.overwrite)
        return remote, backend
    if options.storage_options is not None and not is_url(src):
        raise PackError(f"storage_options applies to a URL SRC or DST (s3://..., gs://...), "
                        f"and neither the source nor the folder {dst} is one; drop it, or "
                        "pass the URL.")
    dst = Path(dst)
    backend = resolve_backend(dst, options.format)
    src_path: Path | str = src if is_url(src) else Path(src or "/-").absolute()
    check_destination(dst, src_path, options.overwrite)
    return Staging(dst), backend


def sample_options(options: PackOptions, source: dict[str, object] | None) -> PackOptions:
    """options (checked) for these samples: shard_samples is Python samples' only (resolved
    from shard_size when not given); an importer's resume needs its source's fingerprint."""
    if source is not None and options.shard_samples is not None:
        raise PackError("shard_samples applies to Python samples only; an importer's samples "
                        "are cut by their size (shard_size).")
    if options.resume and source is not None and not source.get("fingerprint"):
        raise PackError(f"resume=True needs a source that can be recognised again, and this "
                        f"{source.get('kind', 'source')} has no fingerprint; pack it without "
                        "resume.")
    return replace(options, shard_samples=check_shard_samples(options.shard_samples,
                                                              options.shard_size))


def _listed(samples: object, skip_bad: bool) -> ListedPlan | None:
    """What the plan keeps of samples that are a listing of files (sources/base.ListedPlan),
    None for others; PackError at the first file the listing refused that is data (an
    unreadable or special file, one over max_file_size) unless skip_bad (then skipped.json
    lists it)."""
    listed = getattr(samples, "listed", None)
    if listed is None:
        return None
    kept: ListedPlan = listed()
    if kept.bad and not skip_bad:
        path, reason = kept.bad[0]
        raise PackError(f"{kept.root}/{path}: {reason}; {BAD_ITEM_FIX}")
    return kept


def importer_plan(samples: Indexable, specs: list[FieldSpec], source: dict[str, object],
                  reopen: dict[str, object] | None, shard_size: int, skip_bad: bool,
                  max_files: int = MAX_SHARD_FILES) -> ShardPlan:
    """An importer's samples cut by their size hints, with their keys (got in one pass), and
    the listing the plan keeps where the samples are one (a tree's: its tasks read their
    samples back from it, the commit its counts)."""
    listed = _listed(samples, skip_bad)
    sizes, keys = sizes_and_keys(samples, primary_image(specs).name, file_fields(specs))
    plan = ShardPlan(cut(sizes, shard_size, max_files), sizes, keys=keys,
                     fingerprint=str(source.get("fingerprint", "")), reopen=reopen,
                     fields=[s.to_json() for s in specs])
    if listed is not None:
        plan.path_offsets, plan.path_bytes = listed.path_offsets, listed.path_bytes
        plan.labels, plan.mtimes, plan.root = listed.labels, listed.mtimes, listed.root
        plan.scan = cast(ScanCounts, listed.counts)
    return plan


class SampleSource:
    """Samples of declared fields as the pipeline's source: an importer's (a table, file
    groups, .tar shards, a COCO file; `source` describes it, with its fingerprint, and `reopen`
    how a task opens it again) or Python samples (a sequence read by index, or a plain
    iterable read in order); cut into a ShardPlan, committed as format v2."""

    def __init__(self, samples: Any, specs: list[FieldSpec], source: dict[str, object] | None,
                 reopen: dict[str, object] | None) -> None:
        self.samples, self.specs, self.source, self.reopen = samples, specs, source, reopen

    @property
    def resumable(self) -> bool:
        """An importer's source can be recognised again (its items' keys, or fingerprint), and
        so can Python samples read by index (read again, each keyed as its task keyed it); a
        plain iterable is read once, so nothing of its pack is kept."""
        return self.source is not None or is_sequence(self.samples)

    def open_staging(self, dst: str | os.PathLike[str], options: PackOptions
                     ) -> tuple[Staging | RemoteStaging, str]:
        """dst's staging, checked but not opened, and its backend. options: from
        sample_options."""
        if options.engine == "ray" and not is_sequence(self.samples):
            raise PackError("engine='ray' needs samples it can read by index (a sequence or a "
                            "map-style dataset: len() and [i]); pack this iterable with "
                            "engine='local', or pass list(samples).")
        if options.resume and not self.resumable:
            raise PackError("resume=True needs samples it can read again by index (a sequence "
                            "or a map-style dataset: len() and [i]), and a plain iterable is "
                            "read once; pass list(samples), or drop resume.")
        target = str(dst) if is_url(dst) else Path(dst).expanduser().absolute()
        return _open_staging(target, self.source, options)

    def listing(self, staging: Staging | RemoteStaging, backend: str, options: PackOptions
                ) -> tuple[ShardPlan | None, dict[str, object], dict[str, object] | None]:
        """The samples cut into a plan (a plain iterable gets none yet: its bounds are known
        once it is read), with per-item keys where an importer's items can tell them; a URL
        DST's run settings ({}: its token)."""
        identity = _identity(self.specs, backend, self.source, options)
        fields = [s.to_json() for s in self.specs]  # as identity["fields"]
        samples = self.samples
        run: dict[str, object] | None = {} if isinstance(staging, RemoteStaging) else None
        if not is_sequence(samples):
            return None, identity, run
        if len(samples) == 0:
            raise PackError(f"no sample could be packed into {staging.dst} (0 "
                            "skipped): the source has no samples.")
        if self.source is not None:  # cut by size hints, got with the keys in one pass
            plan = importer_plan(samples, self.specs, self.source, self.reopen,
                                 options.shard_size, options.skip_bad)
        else:  # Python samples, cut by count: their keys are their tasks'
            assert options.shard_samples is not None
            plan = ShardPlan(count_bounds(len(samples), options.shard_samples),
                             np.zeros(len(samples), np.int64), fields=fields)
        if plan.keys is not None:
            identity["item_keys"] = True
        return plan, identity, run

    def run(self, staging: Staging | RemoteStaging, plan: ShardPlan | None,
            settings: TaskSettings, options: PackOptions) -> tuple[ShardPlan, set[int]]:
        if plan is None:  # a plain iterable: read in order here, a part every shard_samples
            return self._stream(staging, settings, options)
        assert isinstance(plan, ShardPlan)
        items = SampleItems(self.samples, self.specs, settings, plan)
        return plan, run_pending(staging, plan, items, settings, options)

    def _stream(self, staging: Staging | RemoteStaging, settings: TaskSettings,
                options: PackOptions) -> tuple[ShardPlan, set[int]]:
        from fastloader.pack.engines.local import run_stream
        from fastloader.pack.engines.progress import Meter

        plan = ShardPlan(count_bounds(0, 1), count_bounds(0, 1)[1:],
                         fields=settings.fields or [])
        stage = staging.stage if isinstance(staging, RemoteStaging) else staging.dir
        meter = Meter(plan, [], options.progress, options.quiet)
        assert options.shard_samples is not None and options.workers is not None
        try:
            run_stream(stage, plan, SampleItems(self.samples, self.specs, settings),
                       self.samples, settings, options.workers, options.shard_samples, meter)
        finally:
            meter.close()
        return plan, set(range(plan.num_shards))


def pack_samples(samples: Any, dst: str | os.PathLike[str],
                 fields: Mapping[str, object] | list[FieldSpec] | None, options: PackOptions,
                 *, source: dict[str, object] | None = None,
                 reopen: dict[str, object] | None = None) -> Manifest:
    """Pack samples into dst as a format v2 dataset (see fastloader.pack for the options).

    `fields` is a dict (parsed here; None is refused there, naming fields=) or a list of
    FieldSpecs (from an importer); `source` describes where an importer read from, kept in
    the manifest's options; resume=True
    reuses the parts an interrupted pack of the same source and options finished: each one
    whose items are unchanged (their keys, sources/hints.item_keys; Python samples read by
    index are read again and keyed as their tasks keyed them, staging/items.sample_key), or,
    where the source cannot tell its items (tars at URLs), all of them while its
    `fingerprint` (the source files' names, sizes and mtimes) is unchanged; a plain iterable
    cannot resume. `reopen` is how a shard task
    opens the importer's source again (engine="ray", `packdata shard`). A URL dst (with
    fsspec's storage_options) is staged remotely: every task uploads its own part.
    """
    options = sample_options(options.checked(), source)
    specs = fields if isinstance(fields, list) else parse_fields(fields)
    return drive(SampleSource(samples, specs, source, reopen), dst, options)
