"""dataset_info(): counts, class histogram, shards, bytes, image sizes (a clip dataset's account
by its records kind instead: hours, lengths, rates, frame rates, sizes) and options of a
dataset."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.format.dataset import PackedDataset
from fastloader.format.disk_space import human_bytes
from fastloader.format.kinds import Facts, Kind, get, names
from fastloader.format.manifest import Codec
from fastloader.format.open import open_dataset

_SHOWN_CLASSES = 20

# dataset_info()'s JSON-ready summary (what --json prints). Its values stay untyped: the kind's
# account sits under the kind's own name (info["audio"]), which no TypedDict can declare
Info = dict[str, Any]


def _spread(values: np.ndarray) -> dict[str, float]:
    return {
        "min": int(values.min()),
        "median": float(np.median(values)),
        "mean": round(float(values.mean()), 1),
        "max": int(values.max()),
    }


def dataset_info(path: str | os.PathLike[str]) -> Info:
    """A JSON-ready summary of the dataset at path (DatasetNotFoundError if it is not one)."""
    with open_dataset(path) as ds:
        manifest = ds.manifest
        histogram = np.bincount(ds.labels, minlength=len(ds.classes))[: len(ds.classes)]
        codecs = np.bincount(ds.codecs, minlength=len(Codec))
        skipped_file = Path(ds.root) / "skipped.json"  # not fetched for a URL: stats count
        skipped_count = (len(json.loads(skipped_file.read_text())) if skipped_file.is_file()
                         else int(manifest.stats.get("skipped", 0)))
        info = {
            "path": str(getattr(ds, "url", ds.root)),  # a remote dataset: its URL
            "backend": ds.backend,
            "format_version": manifest.version,
            "created_by": manifest.created_by,
            "created_at": manifest.created_at,
            "records": len(ds),
            "fields": {name: spec.describe() for name, spec in ds.fields.items()},
            "classes": len(ds.classes),
            "class_counts": dict(zip(ds.classes, histogram.tolist(), strict=True)),
            "shards": [
                {"file": s.file, "records": s.count, "bytes": s.bytes} for s in manifest.shards
            ],
            "total_bytes": manifest.total_bytes,
            "record_bytes": _spread(ds.lengths),
            "height": _spread(ds.shapes[:, 0]),
            "width": _spread(ds.shapes[:, 1]),
            "codecs": {Codec(c).name: int(n) for c, n in enumerate(codecs.tolist()) if n},
            "codec_bytes": {Codec(c).name: int(ds.lengths[ds.codecs == c].sum())
                            for c, n in enumerate(codecs.tolist()) if n},
            "options": manifest.options,
            "stats": manifest.stats,
            "skipped": skipped_count,
        }
        kind = ds.fields[ds.image_field].kind
        summary = kind.summary(ds.columns.meta(ds.image_field)) if isinstance(kind, Facts) \
            and ds.columns is not None else None
        if summary is not None:
            # clips, not images: the records kind's account (hours, lengths ...), not sizes
            del info["height"], info["width"]
            info[kind.name] = summary
            info.update(_clip_codecs(ds, kind))
        return info


def _clip_codecs(ds: PackedDataset, kind: Kind) -> dict[str, object]:
    """A clip dataset's codecs (the index stores UNKNOWN for every clip) as kind.codec() names
    them, read from up to kind.codecs_read records spread evenly ("codecs_sampled": how many
    when fewer than all); a remote dataset's clips are not fetched for it: no codecs."""
    if getattr(ds, "url", None) is not None or not len(ds) or not kind.codecs_read:
        return {"codecs": {}, "codec_bytes": {}}
    rows = np.unique(np.linspace(0, len(ds) - 1, min(len(ds), kind.codecs_read))
                     .astype(np.int64))
    counts: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for i in rows.tolist():
        record = ds.record(i, verify=False)
        name = kind.codec(record)
        counts[name] = counts.get(name, 0) + 1
        sizes[name] = sizes.get(name, 0) + len(record)
    found: dict[str, object] = {"codecs": counts, "codec_bytes": sizes}
    if len(rows) < len(ds):
        found["codecs_sampled"] = len(rows)
    return found


def _class_lines(counts: dict[str, int]) -> list[str]:
    names = list(counts)
    if not names:
        return []
    width = max(len(n) for n in names[:_SHOWN_CLASSES])
    lines = [f"  {n:<{width}}  {counts[n]}" for n in names[:_SHOWN_CLASSES]]
    if len(names) > _SHOWN_CLASSES:
        rest = [counts[n] for n in names[_SHOWN_CLASSES:]]
        lines.append(
            f"  ... {len(rest)} more classes ({min(rest)}..{max(rest)} records each; "
            "--json lists all)"
        )
    return lines


def _size_lines(info: Info) -> list[str]:
    height, width = info["height"], info["width"]
    return [f"height    {height['min']} min, {height['median']:g} median, {height['max']} max",
            f"width     {width['min']} min, {width['median']:g} median, {width['max']} max"]


def _summary_lines(info: Info) -> list[str] | None:
    """The records kind's account (under its name, e.g. info["video"]) as text; None when
    the dataset's records are images (their sizes are shown)."""
    kind = next((get(name) for name in names() if isinstance(info.get(name), dict)), None)
    return None if kind is None else kind.summary_lines(info[kind.name])


def _codec_lines(info: Info) -> list[str]:
    if not info["codecs"]:  # a remote clip dataset: its clips were not read
        return []
    sampled = info.get("codecs_sampled")
    return ["codecs    " + ", ".join(f"{k} {v} ({human_bytes(info['codec_bytes'][k])})"
                                     for k, v in info["codecs"].items())
            + (f" (of {sampled} records sampled evenly)" if sampled else "")]


def format_info(info: Info) -> str:
    """Human-readable text for dataset_info()'s result."""
    shards = info["shards"]
    size = info["record_bytes"]
    lines = [
        f"dataset   {info['path']}",
        f"backend   {info['backend']} (format v{info['format_version']}, "
        f"{info['created_by']}, {info['created_at']})",
        f"records   {info['records']} in {len(shards)} shards, "
        f"{human_bytes(info['total_bytes'])} on disk",
        f"record    {human_bytes(size['min'])} min, {human_bytes(size['median'])} median, "
        f"{human_bytes(size['max'])} max",
        *(_summary_lines(info) or _size_lines(info)),
        *_codec_lines(info),
        "options   " + ", ".join(f"{k}={v}" for k, v in sorted(info["options"].items())),
        f"skipped   {info['skipped']} "
        + ("unreadable source files" if info["format_version"] == 1 else "bad samples")
        + " (listed in skipped.json)",
        "fields    " + ", ".join(f"{k} ({v})" for k, v in info["fields"].items()),
        f"classes   {info['classes']}",
        *_class_lines(info["class_counts"]),
    ]
    return "\n".join(lines)
