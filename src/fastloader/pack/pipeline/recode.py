"""recode(): a packed JPEG dataset as a coeffs dataset, or back, without its source tree.

Each JPEG record becomes a coeffs record (fastloader.decode.coeffs: the same coefficients, so
the same pixels, in a layout that decodes faster and crops without entropy-decoding the rows
above); every other record (PNG, WebP, ... and JPEGs the codec does not hold: progressive
files whose scans stop early) keeps its bytes; codec "jpeg" turns
coeffs records back into JPEGs of the same pixels. Records are checked against their crc32
before they are read; the output is built in a hidden staging folder and renamed into place,
as pack and merge do. The manifest's options say the dataset's codec ("codec": "coeffs").
Any dataset: v1 or v2 (every other index field and column, boxes, masks, labels, paths and
further image fields, copied as it is: only the records change), tiled or not (a tiled
dataset's records become coeffs records and its tile tables and `tiles` option go).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from fastloader.decode import coeffs
from fastloader.errors import DecodeError, PackError
from fastloader.format import index as index_mod
from fastloader.format.backends import backend_module
from fastloader.format.dataset import PackedDataset
from fastloader.format.manifest import MANIFEST_NAME, Codec, Manifest, ShardInfo
from fastloader.pack.sources.tiling import INDEX_FIELDS
from fastloader.pack.staging.commit import SKIPPED_NAME
from fastloader.pack.staging.journal import Staging, file_digest, is_dataset, write_atomic

CODECS = ("coeffs", "jpeg")
_SHOWN_KEPT = 5


@dataclass
class _Output:
    """The output's shards and index columns, one input shard at a time."""

    shards: list[ShardInfo] = field(default_factory=list)
    columns: dict[str, list[np.ndarray]] = field(default_factory=dict)
    recoded: int = 0
    kept: dict[str, int] = field(default_factory=dict)  # why a JPEG stayed JPEG -> how many

    def add(self, name: str, value: np.ndarray) -> None:
        self.columns.setdefault(name, []).append(value)


def _open_source(path: Path) -> PackedDataset:
    if not is_dataset(path):
        raise PackError(f"{path} is not a packed dataset (no {MANIFEST_NAME}); recode converts "
                        "a folder made by packdata.")
    return PackedDataset(path)


def _dropped(ds: PackedDataset, codec: str) -> frozenset[str]:
    """Index fields the output leaves out: a tiled dataset's tile tables when its records
    become coeffs records (they crop by their own segments; the tables describe JPEG bytes
    that are no longer stored)."""
    return frozenset(INDEX_FIELDS) if ds.tiled and codec == "coeffs" else frozenset()


def _recode_one(ds: PackedDataset, i: int, codec: str) -> tuple[bytes, int, str | None]:
    """(bytes, codec, why a JPEG was kept) of record i in codec, its crc32 checked first."""
    data = bytes(ds.record(i))
    if zlib.crc32(data) != int(ds.crc32s[i]):
        raise PackError(f"{ds.describe(i)} fails its crc32 check; run `packdata verify "
                        f"{ds.root}` and repack that dataset before recoding it.")
    kind = int(ds.codecs[i])
    if codec == "jpeg":  # coeffs records back to JPEG (the same pixels); the rest as they are
        if kind != Codec.COEFFS:
            return data, kind, None
        try:
            return coeffs.to_jpeg(data), int(Codec.JPEG), None
        except DecodeError as exc:
            raise PackError(f"{ds.describe(i)}: {exc}; run `packdata verify {ds.root} "
                            "--decode`.") from exc
    if kind != Codec.JPEG:
        return data, kind, None
    try:
        return coeffs.encode(data), int(Codec.COEFFS), None
    except DecodeError as exc:
        return data, kind, str(exc).split(": ", 1)[-1]


def _recode_shard(ds: PackedDataset, k: int, target: Path, start: int, codec: str,
                  pool: ThreadPoolExecutor, out: _Output) -> None:
    info = ds.manifest.shards[k]
    span = range(info.start, info.stop)
    results = list(pool.map(lambda i: _recode_one(ds, i, codec), span))  # GIL released
    records = [r[0] for r in results]
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    layout = backend_module(ds.backend).write_shard(tmp, start, records)
    os.replace(tmp, target)
    size, sha = file_digest(target)
    sl = slice(info.start, info.stop)
    out.add("shard", np.full(info.count, len(out.shards), np.int32))
    out.add("offset", np.asarray(layout.offsets, np.int64))
    out.add("length", np.asarray([len(r) for r in records], np.int64))
    out.add("codec", np.asarray([r[1] for r in results], np.uint8))
    out.add("crc32", np.asarray([zlib.crc32(r) for r in records], np.uint32))
    for (_, new, why), old in zip(results, ds.codecs[sl], strict=True):
        out.recoded += int(new) != int(old)
        if why is not None:
            out.kept[why] = out.kept.get(why, 0) + 1
    out.shards.append(ShardInfo(target.name, start, info.count, size, sha, layout.data_offset))


def _manifest(ds: PackedDataset, out: _Output, codec: str) -> Manifest:
    from fastloader import __version__

    first = ds.manifest
    untiled = bool(_dropped(ds, codec))
    stats = {k: v for k, v in first.stats.items()
             if not (untiled and k in ("tiled", "untiled"))}
    stats["record_bytes"] = int(sum(int(c.sum()) for c in out.columns["length"]))
    stats["recoded"] = out.recoded
    stats["kept_jpeg"] = sum(out.kept.values())
    options = {k: v for k, v in first.options.items() if not (untiled and k == "tiles")}
    return Manifest(
        backend=first.backend, num_samples=len(ds), classes=list(ds.classes),
        shards=out.shards, fields={}, options={**options, "codec": codec}, stats=stats,
        created_by=f"fastloader {__version__}",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        version=first.version, sample_fields=list(first.sample_fields),
    )


def recode(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, codec: str = "coeffs",
           workers: int | None = None, overwrite: bool = False) -> Manifest:
    """Write src's samples to a new dataset dst with its JPEG records in another codec.

    Args:
        src: a packed dataset folder (v1 or v2, tiled or not).
        dst: the dataset folder to create (same backend as src).
        codec: "coeffs" (JPEG records become coeffs records) or "jpeg" (coeffs records
            become JPEGs of the same pixels, e.g. for DALI).
        workers: threads encoding records (default: the usable cores).
        overwrite: replace dst if it is a packed dataset.

    Returns:
        Manifest: what was written; stats["recoded"] records changed codec,
        stats["kept_jpeg"] JPEGs stayed JPEG (a kind coeffs records do not hold).

    Raises:
        PackError: codec is unknown, src is not a dataset, a record fails its crc32, dst
            exists (without overwrite) or is src.
        NativeUnavailableError: the native extension (the encoder) is not in use.
    """
    if codec not in CODECS:
        raise PackError(f"recode --codec {codec!r} is not supported; use one of {CODECS}.")
    root, target = Path(src).expanduser().absolute(), Path(dst).expanduser().absolute()
    if target == root or not target.parent.is_dir():
        raise PackError(f"cannot write {target}: it is SRC or its parent folder does not exist; "
                        "choose another DST.")
    if (target.exists() or target.is_symlink()) and not (overwrite and is_dataset(target)):
        raise PackError(f"{target} already exists; pass --overwrite to replace a packed "
                        "dataset, or choose another DST.")
    if coeffs.native_reason():
        from fastloader.errors import NativeUnavailableError

        raise NativeUnavailableError(f"recode cannot run: {coeffs.native_reason()}")
    ds = _open_source(root)
    staging, opened = Staging(target), False
    try:
        staging.open({"recode": str(root), "codec": codec}, resume=False)
        opened = True
        out = _Output()
        suffix = backend_module(ds.backend).SHARD_SUFFIX
        threads = workers or len(os.sched_getaffinity(0))
        with ThreadPoolExecutor(max(1, threads), "fastloader-recode") as pool:
            for k, info in enumerate(ds.manifest.shards):
                _recode_shard(ds, k, staging.dir / f"shard-{k:05d}{suffix}", info.start, codec,
                              pool, out)
        kept = {name: ds.field(name) for name in ds.manifest.fields
                if name not in _dropped(ds, codec)}  # labels, shapes, paths, v2 columns
        arrays = kept | {name: np.concatenate(parts) for name, parts in out.columns.items()}
        fields = index_mod.write_index(staging.dir, arrays)
        skipped = root / SKIPPED_NAME
        write_atomic(staging.dir / SKIPPED_NAME,
                     skipped.read_text() if skipped.is_file() else json.dumps([]))
        manifest = _manifest(ds, out, codec)
        manifest.fields = fields
        staging.finish(manifest.write, overwrite)
    except BaseException:
        if opened:  # nothing to resume: leave no staging folder behind
            shutil.rmtree(staging.dir, ignore_errors=True)
        raise
    finally:
        staging.release()
        ds.close()
    return manifest


def kept_summary(manifest: Manifest) -> str:
    """One line for the CLI: how many records were recoded and kept."""
    stats: Mapping[str, object] = manifest.stats
    if manifest.options["codec"] == "jpeg":
        return (f"recoded {stats.get('recoded', 0)} coeffs records to JPEG (the same pixels); "
                "other records unchanged")
    return (f"recoded {stats.get('recoded', 0)} JPEG records to {manifest.options['codec']}; "
            f"{stats.get('kept_jpeg', 0)} JPEGs kept their bytes (kinds coeffs records do not "
            "hold), other images unchanged")
