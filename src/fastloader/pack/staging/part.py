"""One shard, one task: its shard file and its part-manifest in the staging folder.

A task reads its files (plan.py's slice), writes the shard file under a temporary name and
renames it into place, then its index arrays (journal/NNNNN.part.npz) and, last, its
part-manifest journal/NNNNN.json (counts, sizes, sha256s, skipped files), so a part-manifest
always means a whole part. Running a task twice (an engine's retry, a killed task re-run, two
`packdata shard` runs of one range) writes the same bytes again: tasks are idempotent.

A shard's LMDB keys start at its plan position lo (known before the files before it are
read); the commit step (commit.py) gives each shard its sample range and records the key in
the manifest (ShardInfo.first_key) where they differ (skipped files before it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fastloader.errors import PackError
from fastloader.format.backends import backend_module
from fastloader.format.manifest import ShardInfo
from fastloader.pack.sources import tiling
from fastloader.pack.sources.validate import Prepared, prepare
from fastloader.pack.staging.journal import (
    JOURNAL_DIR,
    PLAN_NAME,
    file_digest,
    sha256_file,
    write_atomic,
)
from fastloader.pack.staging.plan import PLAN_DIR, ShardPlan, Spans

log = logging.getLogger(__name__)
SETTINGS_NAME = "settings.json"  # in plan/: what a run adds to the plan (strict)
_ARRAYS = ("kept", "offset", "length", "height", "width", "codec", "crc32")
_DTYPES = ("int64", "int64", "int64", "int32", "int32", "uint8", "uint32")


@dataclass
class Part:
    """A finished part-manifest: shard k's files lo..hi, its shard (None when every file was
    skipped), the skipped files and the sha256 of its index arrays."""

    shard: int
    lo: int
    hi: int
    digest: str
    info: ShardInfo | None
    skipped: list[list[str]] = field(default_factory=list)
    reencoded: int = 0
    arrays_sha256: str = ""
    tiles_sha256: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Part:
        raw = json.loads(text)
        info = raw.pop("info")
        return cls(info=None if info is None else ShardInfo(**info), **raw)


def part_path(staging: Path, k: int, suffix: str = ".json") -> Path:
    """Where shard k's part files live: staging/journal/NNNNN<suffix>."""
    return staging / JOURNAL_DIR / f"{k:05d}{suffix}"


def read_settings(staging: Path) -> dict[str, Any]:
    """The plan's identity (plan.json: backend, options) with the run settings (strict)."""
    try:
        settings = json.loads((staging / PLAN_NAME).read_text())
        settings |= json.loads((staging / PLAN_DIR / SETTINGS_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise PackError(f"{staging} holds no readable shard plan ({exc}); run `packdata plan "
                        "SRC DST` again.") from None
    return settings


def prepare_job(settings: dict[str, Any]) -> Callable[[str], Prepared]:
    """The per-file work of this pack (read, check, maybe re-encode or tile), picklable."""
    if settings.get("tiles") is not None:
        return functools.partial(
            tiling.prepare_tiled, max_side=settings["max_side"], quality=settings["quality"],
            restart_mcus=settings["tiles"]["restart_mcus"],
            max_file_size=settings["max_file_size"],
            storage_options=settings.get("storage_options"))
    return functools.partial(prepare, max_side=settings["max_side"],
                             quality=settings["quality"], max_file_size=settings["max_file_size"],
                             storage_options=settings.get("storage_options"))


def _write_bytes(path: Path, payload: bytes) -> str:
    """Write payload durably; its sha256 (of the bytes in hand: no read-back)."""
    with open(path, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    return hashlib.sha256(payload).hexdigest()


def _save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> str:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return _write_bytes(path, buffer.getvalue())


def _write_shard(staging: Path, k: int, lo: int, data: list[bytes], backend: str
                 ) -> tuple[ShardInfo, list[int]]:
    module = backend_module(backend)
    name = f"shard-{k:05d}{module.SHARD_SUFFIX}"
    tmp = part_path(staging, k, f".tmp-{os.getpid()}{module.SHARD_SUFFIX}")
    layout = module.write_shard(tmp, lo, data)
    size, sha256 = file_digest(tmp)
    os.replace(tmp, staging / name)
    # start is given at commit; lo stands in for it (and is the LMDB key of the first record)
    info = ShardInfo(name, lo, len(data), size, sha256, layout.data_offset, lo)
    return info, list(layout.offsets)


class RemoteParts(Protocol):
    """Where the tasks put their parts when DST is a URL (remote_stage.RemoteStage): each part
    is built in a local folder, then uploaded."""

    def build(self, k: int, make: Callable[[Path], Part]) -> Part: ...

    def load_plan(self) -> tuple[Any, dict[str, Any]]: ...


Stage = Path | RemoteParts  # what the engines hand each task: a staging folder, or remote


def build_part(staging: Stage, plan: ShardPlan, k: int, settings: dict[str, Any],
               prepared: Iterable[Prepared]) -> Part:
    """Write shard k from its files' prepared records (in listing order), then its part."""
    if not isinstance(staging, Path):  # built in a local folder, then uploaded
        return staging.build(k, lambda folder: build_part(folder, plan, k, settings, prepared))
    lo, hi = plan.span(k)
    data: list[bytes] = []
    kept: list[int] = []
    rows: list[tuple[int, int, int, int, int]] = []
    skipped: list[list[str]] = []
    tiles = tiling.TileColumns() if settings.get("tiles") is not None else None
    reencoded = 0
    for i, record in zip(range(lo, hi), prepared, strict=True):
        if record.data is None:
            if settings.get("strict"):
                raise PackError(f"{plan.source(i)}: {record.error}; fix or remove "
                                "it, or pack without --strict to skip unreadable files.")
            skipped.append([plan.relpath(i), record.error or "unknown error"])
            log.warning("pack: skipped %s: %s", skipped[-1][0], skipped[-1][1])
            continue
        data.append(record.data)
        kept.append(i)
        rows.append((len(record.data), record.height, record.width, record.codec,
                     record.crc32))
        reencoded += record.reencoded
        if tiles is not None:
            tiles.add(record)
    part = Part(k, lo, hi, plan.digest(k), None, skipped, reencoded)
    offsets: list[int] = []
    if data:
        part.info, offsets = _write_shard(staging, k, lo, data, settings["backend"])
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    arrays = {name: np.asarray(values, dtype) for name, values, dtype in
              zip(_ARRAYS, [kept, offsets, *columns], _DTYPES, strict=True)}
    part.arrays_sha256 = _save_arrays(part_path(staging, k, ".part.npz"), arrays)
    if tiles is not None:
        part.tiles_sha256 = _save_arrays(part_path(staging, k, tiling.SHARD_SUFFIX),
                                         tiles.take())
    write_atomic(part_path(staging, k), part.to_json())
    return part


@functools.lru_cache(maxsize=4)
def _cached_plan(staging: str, stamp: int) -> tuple[ShardPlan, dict[str, Any]]:
    return ShardPlan.load(Path(staging)), read_settings(Path(staging))


def _load_plan(staging: Stage) -> tuple[ShardPlan, dict[str, Any]]:
    if not isinstance(staging, Path):
        return staging.load_plan()
    try:
        stamp = (staging / PLAN_NAME).stat().st_mtime_ns
    except OSError:
        raise PackError(f"{staging} holds no shard plan; run `packdata plan SRC DST` "
                        "first.") from None
    return _cached_plan(str(staging), stamp)


def run_shard(staging: str | os.PathLike[str] | RemoteParts, k: int) -> dict[str, int]:
    """The task of shard k, where the engine runs it: read the plan, prepare the files one
    after another, write the part. Returns {files, bytes, packed} for the driver's progress."""
    stage: Stage = Path(staging) if isinstance(staging, (str, os.PathLike)) else staging
    plan, settings = _load_plan(stage)
    if not 0 <= k < plan.num_shards:
        raise PackError(f"shard {k} is not in the plan of {staging} (shards 0..."
                        f"{plan.num_shards - 1}).")
    lo, hi = plan.span(k)
    job = prepare_job(settings)
    records = (job(plan.source(i)) for i in range(lo, hi))
    part = build_part(stage, plan, k, settings, records)
    return {"files": hi - lo, "bytes": int(plan.sizes[lo:hi].sum()),
            "packed": 0 if part.info is None else part.info.count}


def load_arrays(staging: Path, k: int) -> dict[str, np.ndarray]:
    """Shard k's index arrays as its task wrote them (kept listing positions, offset, length,
    shape, codec, crc32; a sample part's also its encoded columns)."""
    with np.load(part_path(staging, k, ".part.npz"), allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def check_part(staging: Path, plan: Spans, k: int, hash_shard: bool = True,
               sizes: Mapping[str, int] | None = None) -> tuple[Part | None, str]:
    """Shard k's part when it is whole and made from the plan's files, else why not.

    sizes: the shard files' sizes when they are not in staging (a URL's listing); then only
    the size is checked: the sha256 is the one the task computed over the bytes it uploaded.
    """
    try:
        part = Part.from_json(part_path(staging, k).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "was never written (its task did not finish)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"has an unreadable part-manifest ({type(exc).__name__})"
    if (part.shard, part.lo, part.hi, part.digest) != (k, *plan.span(k), plan.digest(k)):
        return None, "was made from other source files (the source changed since)"
    npz = part_path(staging, k, ".part.npz")
    if not npz.is_file() or sha256_file(npz)[1] != part.arrays_sha256:
        return None, f"has damaged index arrays ({npz.name})"
    tiles = part_path(staging, k, tiling.SHARD_SUFFIX)
    if part.tiles_sha256 and (not tiles.is_file() or sha256_file(tiles)[1] != part.tiles_sha256):
        return None, f"has damaged tile columns ({tiles.name})"
    count = (0 if part.info is None else part.info.count) + len(part.skipped)
    if count != part.hi - part.lo:
        return None, f"counts {count} files, its plan range has {part.hi - part.lo}"
    if part.info is None:
        return part, ""
    shard = staging / part.info.file
    if sizes is not None:
        hash_shard = False
        size = sizes.get(part.info.file)
    else:
        size = shard.stat().st_size if shard.is_file() else None
    if size != part.info.bytes:
        return None, (f"has its shard file {part.info.file} missing or not {part.info.bytes} "
                      "bytes")
    if hash_shard and sha256_file(shard)[1] != part.info.sha256:
        return None, f"has a shard file {part.info.file} whose sha256 is not the part's"
    return part, ""
