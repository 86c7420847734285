"""Pack samples (dicts of field values) into a format v2 dataset: parallel, in order, atomic.

The Python API (`fastloader.pack(samples, dst, fields=...)`) and every importer but the
ImageFolder one come here. A sequence or map-style dataset is read by index in forked pool
workers (its __getitem__ runs in parallel); any other iterable is read in order here and its
samples are checked in the pool. The first image field becomes the records (shards, as in v1);
every other field becomes columns under index/ (format/columns.py). A bad sample stops the pack
with its reason (where, field, what), unless skip_bad, which packs the rest and lists it.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import multiprocessing
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.errors import PackError
from fastloader.format import index as index_mod
from fastloader.format.columns import encode_column
from fastloader.format.fields import FieldSpec, label_field, parse_fields, primary_image
from fastloader.format.manifest import Manifest
from fastloader.pack import journal_columns
from fastloader.pack import write as write_mod
from fastloader.pack.listing import SourceFile
from fastloader.pack.values import PreparedSample, prepare_sample

log = logging.getLogger(__name__)
_WINDOW = 1024  # samples in flight per pool window: bounds memory
_SOURCE: Any = None  # the sequence being packed, inherited by forked workers


def _job(item: Any, specs: Sequence[FieldSpec], settings: dict[str, Any]) -> PreparedSample:
    if isinstance(item, int):  # an index into the forked sequence: __getitem__ runs here
        where = f"sample {item}"
        try:
            sample = _SOURCE[item]
        except Exception as exc:  # the user's __getitem__: any failure is this sample's
            return prepare_sample(f"<{type(exc).__name__}: {exc}>", specs, where, settings)
        return prepare_sample(sample, specs, where, settings)
    where, sample = item
    return prepare_sample(sample, specs, where, settings)


def _is_sequence(samples: Any) -> bool:
    return hasattr(samples, "__len__") and hasattr(samples, "__getitem__") and not isinstance(
        samples, (dict, str, bytes))


def _prepared(samples: Any, specs: Sequence[FieldSpec], settings: dict[str, Any],
              start: int = 0) -> Iterator[PreparedSample]:
    """Prepared samples in order from sample `start` on, from a pool holding at most two
    windows."""
    global _SOURCE
    job: Callable[[Any], PreparedSample] = functools.partial(_job, specs=specs,
                                                             settings=settings)
    # fork, explicitly (whatever the global default): workers inherit the sequence and call
    # its __getitem__; without fork, samples travel to the workers pickled, in order.
    forked = _is_sequence(samples) and "fork" in multiprocessing.get_all_start_methods()
    items: Iterable[Any] = (range(start, len(samples)) if forked else itertools.islice(
        ((f"sample {k}", s) for k, s in enumerate(samples)), start, None))
    if settings["workers"] == 1:
        _SOURCE = samples
        yield from map(job, items)
        return
    _SOURCE = samples if forked else None
    try:
        with multiprocessing.get_context("fork" if forked else None).Pool(
            settings["workers"]
        ) as pool:
            iterator = iter(items)
            pending: list[Iterable[PreparedSample]] = []
            while window := list(itertools.islice(iterator, _WINDOW)):
                chunk = max(1, min(32, len(window) // (4 * settings["workers"])))
                pending.append(pool.imap(job, window, chunk))
                if len(pending) > 1:
                    yield from pending.pop(0)
            for rest in pending:
                yield from rest
    finally:
        _SOURCE = None


def _fill(builder: Any, samples: Any, specs: Sequence[FieldSpec], settings: dict[str, Any],
          columns: dict[str, list[Any]]) -> None:
    total = len(samples) if _is_sequence(samples) else 0
    start = sum(r.consumed_count for r in builder.records)  # resumed: these are packed
    bar = write_mod._progress_bar(total, settings["quiet"])
    progress = settings["progress"]
    label = label_field(specs)
    try:
        for k, prepared in enumerate(_prepared(samples, specs, settings, start), start + 1):
            record = prepared.record
            if record.data is None and not settings["skip_bad"]:
                raise PackError(f"{record.error}; fix it, or pass --skip-bad (skip_bad=True) to "
                                "pack the rest and list what was skipped.")
            labelled = prepared.values.get(label.name, 0) if label else 0
            source = SourceFile(prepared.path, labelled, len(record.data or b""), 0)
            builder.add(source, record)
            if record.data is not None:
                for name, values in columns.items():
                    values.append(prepared.values[name])
            if progress is not None:
                progress(k, total, 0)
            if bar is not None:
                bar.update(1)
        builder.flush()
    finally:
        if bar is not None:
            bar.close()


def pack_samples(samples: Any, dst: str | os.PathLike[str], fields: Any, *,
                 format: str | None = None,
                 shard_size: int = write_mod.DEFAULT_SHARD_SIZE, workers: int | None = None,
                 max_side: int | None = None, quality: int = 90, overwrite: bool = False,
                 skip_bad: bool = False, quiet: bool = True, progress: Any = None,
                 max_file_size: int = write_mod.DEFAULT_MAX_FILE_SIZE,
                 source: dict[str, Any] | None = None, resume: bool = False) -> Manifest:
    """Pack samples into dst as a format v2 dataset (see fastloader.pack for the arguments).

    `fields` is a dict (parsed here) or a list of FieldSpecs (from an importer); `source`
    describes where an importer read from, kept in the manifest's options; with its
    `fingerprint` (the source files' names, sizes and mtimes) resume=True reuses the shards
    an interrupted pack of the same source and options finished.
    """
    resumable = bool(source and source.get("fingerprint"))
    if resume and not resumable:
        raise PackError("resume=True needs a source that can be recognised again (a table, "
                        "file groups or .tar shards); Python samples are packed from the start.")
    specs = fields if isinstance(fields, list) else parse_fields(fields)
    shard_size, workers, max_side, quality = write_mod._check_options(shard_size, workers,
                                                                      max_side, quality)
    dst_path = Path(dst).expanduser().absolute()
    backend = write_mod.resolve_backend(dst_path, format)
    src_path = Path(source["path"]).absolute() if source and "path" in source else Path("/-")
    write_mod._check_destination(dst_path, src_path, overwrite)
    options: dict[str, Any] = {"shard_size": shard_size, "max_side": max_side,
                               "quality": quality, "source": source or {"kind": "python"}}
    staging = write_mod.Staging(dst_path)
    settings = {"workers": workers, "max_side": max_side, "quality": quality, "quiet": quiet,
                "max_file_size": max_file_size, "skip_bad": skip_bad, "progress": progress}
    finished = interrupted = False
    try:
        staging.open({"backend": backend, **options, "fields": [s.to_json() for s in specs]},
                     resume)  # the plan holds the source's fingerprint: same input only
        records = primary_image(specs).name
        columns: dict[str, list[Any]] = {s.name: [] for s in specs if s.name != records}
        reused = journal_columns.reuse(staging, specs, columns) if resume else []
        builder = journal_columns.ColumnShardBuilder(staging, backend, shard_size, reused,
                                                     specs, columns)
        _fill(builder, samples, specs, settings, columns)
        if not builder.records:
            raise PackError(f"no sample could be packed into {dst_path} "
                            f"({len(builder.all_skipped)} skipped); see why with skip_bad=False.")
        manifest = _finish(staging, builder, specs, columns, backend, options, overwrite)
        finished = True
    except (KeyboardInterrupt, OSError):
        interrupted = resumable  # kept for resume=True; a bad input is not resumable
        raise
    finally:
        staging.release()
        if not finished and not interrupted:  # nothing half-made is left behind
            shutil.rmtree(staging.dir, ignore_errors=True)
    return manifest


def _finish(staging: Any, builder: Any, specs: Sequence[FieldSpec],
            columns: dict[str, list[Any]], backend: str, options: dict[str, Any],
            overwrite: bool) -> Manifest:
    from fastloader import __version__

    record_bytes = int(sum(np.sum(r.samples["length"]) for r in builder.records))
    arrays = write_mod._build_index(builder.records, False)  # takes the records' columns
    specs_by_name = {s.name: s for s in specs}
    for name, values in columns.items():
        arrays |= encode_column(specs_by_name[name], values)
    index_fields = index_mod.write_index(staging.dir, arrays)
    skipped = [{"sample": where, "reason": reason} for where, reason in builder.all_skipped]
    (staging.dir / write_mod.SKIPPED_NAME).write_text(json.dumps(skipped, indent=1) + "\n")
    label = label_field(specs)
    classes = list(label.classes) if label is not None and label.classes is not None else []
    if label is not None and label.classes is None:  # unnamed labels: their numbers as names
        top = int(np.max(arrays["label"])) if builder.next_sample else -1
        classes = [str(k) for k in range(top + 1)]
        if arrays["label"].min(initial=0) < 0:
            raise PackError(f"field {label.name!r} is the label of this image + int dataset but "
                            "has a negative value; labels are 0..classes-1.")
    manifest = Manifest(
        backend=backend, num_samples=builder.next_sample, classes=classes,
        shards=[r.info for r in builder.records], fields=index_fields, options=options,
        stats={"packed": builder.next_sample, "skipped": len(skipped),
               "skipped_samples": skipped,
               "record_bytes": record_bytes},
        created_by=f"fastloader {__version__}",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        version=2, sample_fields=[s.to_json() for s in specs],
    )
    staging.finish(manifest.write, overwrite)
    return manifest
