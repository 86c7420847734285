"""The commit step: check every part, then write the index, skipped.json and manifest.json
(last), and rename the staging folder to DST, atomically (for a URL DST, upload them over the
downloaded parts: remote_stage.RemoteStaging.finish).

One commit for every source, and one format: a v2 dataset of the declared fields (every part's
index arrays and encoded columns joined: fixed columns and variable values concatenated,
offsets shifted). A source whose plan keeps a listing of files (an ImageFolder tree) adds
its listing's counts to the stats and its refusals to skipped.json, each skipped file named
by its path. Writing format v1 has ended (v1 datasets are still read: format/). A part is
refused when its part-manifest is missing or unreadable, was made from other items, or its
shard file or index arrays do not have the size and sha256 it recorded; the message names
each such shard and the command that
rebuilds it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import numpy as np

from fastloader.decode.orientation import turned_shapes
from fastloader.errors import PackError
from fastloader.format import index as index_mod
from fastloader.format.fields import FieldSpec, label_field, primary_image, specs_from_manifest
from fastloader.format.manifest import Codec, FieldInfo, Manifest, ShardInfo
from fastloader.pack.sources import tiling
from fastloader.pack.staging.items import items_of
from fastloader.pack.staging.journal import JOURNAL_DIR, Staging
from fastloader.pack.staging.part import CORE, Identity, Part, check_part, identity, load_arrays
from fastloader.pack.staging.plan import REPLAN, ShardPlan, Spans, TaskSettings
from fastloader.pack.staging.remote_stage import RemoteStaging

SKIPPED_NAME = "skipped.json"
AnyStaging = Staging | RemoteStaging  # a staging folder, or a URL's (remote_stage.py)
_NAMED = 5  # bad parts named one by one in the refusal; the rest are counted


def _ranges(shards: list[int]) -> list[str]:
    """[3, 4, 5, 9] -> ["3:6", "9:10"]: the --range arguments that rebuild them."""
    spans: list[list[int]] = []
    for k in shards:
        if spans and spans[-1][1] == k:
            spans[-1][1] = k + 1
        else:
            spans.append([k, k + 1])
    return [f"{lo}:{hi}" for lo, hi in spans]


def check_parts(staging: AnyStaging, plan: Spans, made_of: Identity,
                trusted: Collection[int] = ()) -> list[Part]:
    """Every part of the plan, whole and made from the items made_of tells (part.identity);
    PackError naming the missing or damaged ones.

    The parts of `trusted` shards (written or checked by this run) are only checked to be
    whole, their shard files by their size; every other one is compared with its items and
    its shard hashed again (on a few threads). At a URL the parts are downloaded first and
    every shard is checked by its size (remote_stage.py).
    """
    sizes = staging.gather()

    def one(k: int) -> tuple[Part | None, str]:
        fresh = k in trusted
        return check_part(staging.dir, plan, k, None if fresh else made_of,
                          hash_shard=not fresh, sizes=sizes)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, range(plan.num_shards)))
    bad = [(k, why) for k, (part, why) in enumerate(results) if part is None]
    if bad:
        named = "; ".join(
            f"shard {k} (files {plan.span(k)[0]}..{plan.span(k)[1] - 1}, first "
            f"{plan.relpath(plan.span(k)[0])!r}) {why}" for k, why in bad[:_NAMED])
        more = f"; and {len(bad) - _NAMED} more" if len(bad) > _NAMED else ""
        fixes = " ".join(f"--range {r}" for r in _ranges([k for k, _ in bad])[:_NAMED])
        how = (f"Rebuild them with `packdata shard {staging.dst} {fixes}` (one run per range) "
               "and commit again, or rerun the pack with resume=True."
               if isinstance(staging, Staging) else "Rerun the pack with resume=True: it redoes "
               "only these.")
        raise PackError(
            f"cannot commit {staging.dst}: {len(bad)} of {plan.num_shards} shard parts are "
            f"missing or damaged: {named}{more}. {how}"
        )
    return [part for part, _ in results if part is not None]


def placed_shards(staging: AnyStaging, parts: list[Part], backend: str
                  ) -> tuple[list[ShardInfo], list[dict[str, np.ndarray]]]:
    """The parts that have a shard file, in order, each given its sample range (and its LMDB
    first key where that differs: files before it were skipped), with its index arrays."""
    shards: list[ShardInfo] = []
    arrays: list[dict[str, np.ndarray]] = []
    start = 0
    for part in parts:
        if part.info is None:  # every file of this shard was skipped: no shard file
            continue
        got = load_arrays(staging.dir, part.shard)
        if got["length"].size != part.info.count:
            raise PackError(f"cannot commit {staging.dst}: shard {part.shard}'s index arrays "
                            f"hold {got['length'].size} records, its part says "
                            f"{part.info.count}; rebuild it with `packdata shard "
                            f"{staging.dst} --range {part.shard}:{part.shard + 1}`.")
        info = part.info
        key = info.key_start if backend == "lmdb" and info.key_start != start else None
        shards.append(ShardInfo(info.file, start, info.count, info.bytes, info.sha256,
                                info.data_offset, key))
        arrays.append(got)
        start += info.count
    return shards, arrays


def _tile_columns(staging: AnyStaging, parts: list[Part]) -> list[dict[str, np.ndarray]]:
    """The tile columns of every part that has a shard, in order (any source)."""
    tiles: list[dict[str, np.ndarray]] = []
    for part in parts:
        if part.info is not None:
            columns = tiling.load_columns(staging.dir / JOURNAL_DIR, part.shard)
            if columns is None:
                raise PackError(f"cannot commit {staging.dst}: shard {part.shard}'s tile "
                                "columns are unreadable; rebuild it with `packdata shard "
                                f"{staging.dst} --range {part.shard}:{part.shard + 1}`.")
            tiles.append(columns)
    return tiles


def _turned(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """With the records' EXIF orientations (--apply-exif-orientation), each "shape" is the
    turned image's (height, width) (format/index.py's ORIENTATION); else as it is."""
    orientations = arrays.get(index_mod.ORIENTATION)
    if orientations is not None:
        arrays[index_mod.ORIENTATION] = orientations.astype(np.uint8)
        arrays["shape"] = turned_shapes(arrays["shape"], orientations).astype(np.int32)
    return arrays


def write_staged(staging: AnyStaging, shards: list[ShardInfo], arrays: dict[str, np.ndarray],
                 skipped: list[dict[str, str]]) -> dict[str, FieldInfo]:
    """Into the staging: stray shard files removed, the index written (its manifest entries
    returned) and skipped.json."""
    named = {shard.file for shard in shards}
    for stray in staging.dir.glob("shard-*"):  # an earlier plan's, or an emptied shard's
        if stray.name not in named:
            stray.unlink()
    fields = index_mod.write_index(staging.dir, arrays)
    (staging.dir / SKIPPED_NAME).write_text(json.dumps(skipped, indent=1) + "\n")
    return fields


def publish(staging: AnyStaging, overwrite: bool, **entries: Any) -> Manifest:
    """The manifest of these entries, stamped (version, time), written last: DST appears."""
    from fastloader import __version__

    manifest = Manifest(created_by=f"fastloader {__version__}",
                        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        **entries)
    staging.finish(manifest.write, overwrite)
    return manifest


def commit(staging: AnyStaging, plan: ShardPlan, settings: TaskSettings, overwrite: bool,
           trusted: Collection[int] = ()) -> Manifest:
    """Check every part, write index/, skipped.json and manifest.json, rename to DST: format
    v2 with the fields the settings declare. trusted: shards whose parts need not be checked
    again (written or checked by this run)."""
    if settings.fields is None:  # a plan staged by a fastloader that wrote format v1
        raise PackError(f"{staging.dst}'s shard plan was made by an older fastloader; "
                        f"{REPLAN}")
    parts = check_parts(staging, plan, identity(items_of(plan, settings), plan), trusted)
    specs = specs_from_manifest(settings.fields, "the shard plan")
    return _commit_v2(staging, plan, parts, specs, settings, overwrite)


def _options(settings: TaskSettings, **more: object) -> dict[str, object]:
    """The manifest's options: the packing settings, then a format's own (more), then tiles
    and --apply-exif-orientation (manifests without them stay exactly as before)."""
    options: dict[str, object] = {"shard_size": settings.shard_size,
                               "max_side": settings.max_side, "quality": settings.quality,
                               **more}
    if settings.tiles is not None:
        options["tiles"] = settings.tiles
    if settings.codec != "jpeg":  # a JPEG pack's manifest stays exactly as before
        options["codec"] = settings.codec
    if settings.apply_exif_orientation:
        options["apply_exif_orientation"] = True
    return options


def _codec_stats(settings: TaskSettings, codecs: np.ndarray) -> dict[str, int]:
    """A coeffs pack's counts, as recode's: records encoded, JPEGs kept (kinds coeffs records
    do not hold); none for a JPEG pack."""
    if settings.codec == "jpeg":
        return {}
    return {"recoded": int(np.count_nonzero(codecs == Codec.COEFFS)),
            "kept_jpeg": int(np.count_nonzero(codecs == Codec.JPEG))}


def _shifted(offsets: list[np.ndarray]) -> np.ndarray:
    """Per-part (count + 1,) offsets joined into one (total + 1,) array."""
    out, base = [np.zeros(1, np.int64)], 0
    for part in offsets:
        out.append(part[1:] + base)
        base += int(part[-1])
    return np.concatenate(out).astype(np.int64)


def _join(specs: Sequence[FieldSpec], parts: list[dict[str, np.ndarray]]
          ) -> dict[str, np.ndarray]:
    """Every part's core arrays and columns as one dataset's (offsets shifted). The parts'
    arrays are taken out as they are joined, so each is let go once its column is built (the
    peak is the parts and one column, not the parts twice)."""
    def take(name: str) -> list[np.ndarray]:
        return [p.pop(name) for p in parts]

    records = primary_image(specs).name
    columns = {name: role for spec in specs
               for role, name in spec.arrays(spec.name == records).items()}
    extra = (index_mod.ORIENTATION,) if index_mod.ORIENTATION in parts[0] else ()
    empty = np.zeros(0)  # a core array a column builds (the label field's): its place kept
    joined = {name: empty if name in columns else np.concatenate(take(name))
              for name in CORE + extra}
    joined["path_offsets"] = _shifted(take("path_offsets"))
    joined["path_bytes"] = np.concatenate(take("path_bytes")).astype(np.uint8)
    for name, role in columns.items():
        pieces = take(name)
        joined[name] = _shifted(pieces) if role == "offsets" else np.concatenate(pieces)
    return joined


def _sample_index(staging: AnyStaging, plan: ShardPlan, parts: list[Part],
                  specs: Sequence[FieldSpec], backend: str, tiled: bool
                  ) -> tuple[dict[str, np.ndarray], list[ShardInfo]]:
    shards, arrays = placed_shards(staging, parts, backend)
    if not shards and plan.path_offsets is not None:  # a listing of files
        raise PackError(f"no file under {plan.root} could be decoded ({len(plan)} tried); see "
                        "why by packing with skip_bad=False (it stops at the first), or check "
                        "the files are images.")
    if not shards:
        skipped = sum(len(p.skipped) for p in parts)
        raise PackError(f"no sample could be packed into {staging.dst} ({skipped} skipped); "
                        "see why with skip_bad=False.")
    joined = _join(specs, arrays)
    counts = np.asarray([s.count for s in shards], np.int64)
    joined["shard"] = np.repeat(np.arange(len(shards), dtype=np.int32), counts)
    joined["shape"] = np.stack([joined.pop("height"), joined.pop("width")], 1).astype(np.int32)
    if tiled:  # untiled indexes stay exactly as before
        joined |= tiling.index_fields(_tile_columns(staging, parts))
    return _turned(joined), shards


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


def _skipped(plan: ShardPlan, parts: list[Part]) -> list[dict[str, str]]:
    """skipped.json's entries: each bad sample where it came from, and why; a listing's files
    (its own refusals first) by their paths."""
    if plan.path_offsets is None:
        return [{"sample": where, "reason": why} for p in parts for where, why in p.skipped]
    refusals = list(plan.scan.get("refused", [])) + [s for p in parts for s in p.skipped]
    return [{"path": path, "reason": _own(plan, path, reason)} for path, reason in refusals]


def _own(plan: ShardPlan, path: str, reason: str) -> str:
    """A listed file's reason without its location, which its entry names already (a
    sample's reason starts with where it came from: the file's path or URL)."""
    return reason.removeprefix(f"{plan.located(path)}: ")


def _listing_stats(plan: ShardPlan, parts: list[Part]) -> dict[str, object]:
    """A listed source's counts (files found, ignored, empty classes, their bytes, how many
    were re-encoded); none for other sources."""
    if plan.path_offsets is None:
        return {}
    return {"files_found": len(plan), "reencoded": sum(p.reencoded for p in parts),
            **{name: plan.scan[name] for name in (
                "ignored_hidden", "ignored_non_image", "ignored_outside_classes",
                "empty_classes") if name in plan.scan},
            "source_bytes": int(plan.sizes.sum())}


def _commit_v2(staging: AnyStaging, plan: ShardPlan, parts: list[Part],
               specs: Sequence[FieldSpec], settings: TaskSettings, overwrite: bool) -> Manifest:
    """A dataset of declared fields (format v2) of a source's parts."""
    tiled = settings.tiles is not None
    arrays, shards = _sample_index(staging, plan, parts, specs, settings.backend, tiled)
    classes = _classes(specs, arrays["label"])
    skipped = _skipped(plan, parts)
    index_fields = write_staged(staging, shards, arrays, skipped)
    packed = int(arrays["shard"].size)
    by_count = {} if settings.shard_samples is None else {  # Python samples: cut by count
        "shard_samples": settings.shard_samples}
    # a listing's files are named by their paths under its root, and where the root was is no
    # part of the dataset: a tree packs the same dataset from a folder or from its URL
    source = {} if plan.path_offsets is not None else {"source": settings.source}
    options = _options(settings, **source, **by_count)
    stats = {"packed": packed, "skipped": len(skipped), "skipped_samples": skipped,
             **_listing_stats(plan, parts), "record_bytes": int(arrays["length"].sum())}
    if tiled:
        stats |= tiling.tile_stats(arrays)
    stats |= _codec_stats(settings, arrays["codec"])
    return publish(
        staging, overwrite, backend=settings.backend, num_samples=packed, classes=classes,
        shards=shards, fields=index_fields, options=options, stats=stats,
        version=2, sample_fields=[s.to_json() for s in specs])
