"""The commit step of a sample pack: check every part, join their index arrays and encoded
columns, write index/, skipped.json and manifest.json (format v2, last), rename to DST (or,
for a URL DST, upload them over the downloaded parts: remote_stage.RemoteStaging.finish).

Parts are checked as ImageFolder ones are (commit.check_parts: a missing, damaged or other-
source part is named with the `packdata shard` command that rebuilds it). Encoded columns are
joined as they are: fixed columns and variable values concatenated, offsets shifted.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec, label_field, primary_image
from fastloader.format.manifest import Manifest, ShardInfo
from fastloader.pack.staging.commit import (
    AnyStaging,
    check_parts,
    placed_shards,
    publish,
    write_staged,
)
from fastloader.pack.staging.part import Part
from fastloader.pack.staging.sample_part import CORE
from fastloader.pack.staging.sample_plan import SamplePlan


def _shifted(offsets: list[np.ndarray]) -> np.ndarray:
    """Per-part (count + 1,) offsets joined into one (total + 1,) array."""
    out, base = [np.zeros(1, np.int64)], 0
    for part in offsets:
        out.append(part[1:] + base)
        base += int(part[-1])
    return np.concatenate(out).astype(np.int64)


def _join(specs: Sequence[FieldSpec], parts: list[dict[str, np.ndarray]]
          ) -> dict[str, np.ndarray]:
    """Every part's core arrays and columns as one dataset's (offsets shifted)."""
    joined = {name: np.concatenate([p[name] for p in parts]) for name in CORE}
    joined["path_offsets"] = _shifted([p["path_offsets"] for p in parts])
    joined["path_bytes"] = np.concatenate([p["path_bytes"] for p in parts]).astype(np.uint8)
    records = primary_image(specs).name
    for spec in (s for s in specs if s.name != records):
        for role, name in spec.arrays().items():
            pieces = [p[name] for p in parts]
            joined[name] = _shifted(pieces) if role == "offsets" else np.concatenate(pieces)
    return joined


def _index(staging: AnyStaging, parts: list[Part], specs: Sequence[FieldSpec],
           backend: str) -> tuple[dict[str, np.ndarray], list[ShardInfo]]:
    shards, arrays = placed_shards(staging, parts, backend)
    if not shards:
        skipped = sum(len(p.skipped) for p in parts)
        raise PackError(f"no sample could be packed into {staging.dst} ({skipped} skipped); "
                        "see why with skip_bad=False.")
    joined = _join(specs, arrays)
    counts = np.asarray([s.count for s in shards], np.int64)
    joined["shard"] = np.repeat(np.arange(len(shards), dtype=np.int32), counts)
    joined["shape"] = np.stack([joined.pop("height"), joined.pop("width")], 1).astype(np.int32)
    return joined, shards


def _classes(specs: Sequence[FieldSpec], labels: np.ndarray) -> list[str]:
    """The class names: the label field's, else its numbers (unnamed labels)."""
    label = label_field(specs)
    if label is None:
        return []
    if label.classes is not None:
        return list(label.classes)
    if labels.min(initial=0) < 0:
        raise PackError(f"field {label.name!r} is the label of this image + int dataset but "
                        "has a negative value; labels are 0..classes-1.")
    return [str(k) for k in range(int(labels.max(initial=-1)) + 1)]


def commit_samples(staging: AnyStaging, plan: SamplePlan, specs: Sequence[FieldSpec],
                   settings: dict[str, Any], overwrite: bool, trusted: Collection[int] = ()
                   ) -> Manifest:
    """Check every part, write index/, skipped.json and manifest.json, rename to DST."""
    parts = check_parts(staging, plan, trusted)
    arrays, shards = _index(staging, parts, specs, settings["backend"])
    classes = _classes(specs, arrays["label"])
    skipped = [{"sample": where, "reason": why} for p in parts for where, why in p.skipped]
    index_fields = write_staged(staging, shards, arrays, skipped)
    packed = int(arrays["shard"].size)
    options = {name: settings[name] for name in ("shard_size", "max_side", "quality", "source")}
    if "shard_samples" in settings:  # Python samples: cut by count
        options["shard_samples"] = settings["shard_samples"]
    return publish(
        staging, overwrite, backend=settings["backend"], num_samples=packed, classes=classes,
        shards=shards, fields=index_fields, options=options,
        stats={"packed": packed, "skipped": len(skipped), "skipped_samples": skipped,
               "record_bytes": int(arrays["length"].sum())},
        version=2, sample_fields=[s.to_json() for s in specs])
