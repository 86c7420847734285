"""A part: what one shard task leaves in the staging folder, and its checks.

A task writes its shard file under a temporary name and renames it into place, then its index
arrays (journal/NNNNN.part.npz) and, last, its part-manifest journal/NNNNN.json (counts,
sizes, sha256s, skipped items), so a part-manifest always means a whole part. Running a task
twice (an engine's retry, a killed task re-run, two `packdata shard` runs of one range)
writes the same bytes again: tasks are idempotent. What goes into a part is built by
pack/staging/build.py, for every source. A part records what it was made from (Part.digest:
span_digest of its items' keys, sources/base.ItemSource.keys); a resume or a commit reuses it
only while identity(items, plan) says the same of the items now.

A shard's LMDB keys start at its plan position lo (known before the items before it are
read); the commit step gives each shard its sample range and records the key in the manifest
(ShardInfo.first_key) where they differ (skipped items before it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from fastloader.format.backends import backend_module
from fastloader.format.manifest import ShardInfo
from fastloader.pack.sources import tiling
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.staging.journal import JOURNAL_DIR, file_digest, sha256_file
from fastloader.pack.staging.plan import ShardPlan, Spans, TaskSettings

# a field source's part: its index arrays besides the columns (the commit joins them)
CORE = ("offset", "length", "height", "width", "codec", "crc32", "label")
Identity = Callable[[int], str]  # shard k -> the digest of its items' keys (span_digest)


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


def write_bytes(path: Path, payload: bytes) -> str:
    """Write payload durably; its sha256 (of the bytes in hand: no read-back)."""
    with open(path, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    return hashlib.sha256(payload).hexdigest()


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> str:
    """Write arrays as one .npz, durably; its sha256."""
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return write_bytes(path, buffer.getvalue())


def write_shard(staging: Path, k: int, lo: int, data: list[bytes], backend: str
                ) -> tuple[ShardInfo, list[int]]:
    """Shard k's records written under a temporary name and renamed into place; its entry
    and the records' offsets in it."""
    module = backend_module(backend)
    name = f"shard-{k:05d}{module.SHARD_SUFFIX}"
    tmp = part_path(staging, k, f".tmp-{os.getpid()}{module.SHARD_SUFFIX}")
    try:
        layout = module.write_shard(tmp, lo, data)
        size, sha256 = file_digest(tmp)
        os.replace(tmp, staging / name)
    except BaseException:  # a full disk, a stop: no half-written shard left taking room
        tmp.unlink(missing_ok=True)
        raise
    # start is given at commit; lo stands in for it (and is the LMDB key of the first record)
    info = ShardInfo(name, lo, len(data), size, sha256, layout.data_offset, lo)
    return info, list(layout.offsets)


def span_digest(lo: int, hi: int, keys: bytes) -> str:
    """What a part records of its items lo..hi (Part.digest): the sha256 of their range and
    their keys (ItemSource.keys), so a part made from other items is not reused."""
    digest = hashlib.sha256(f"{lo}:{hi}".encode())
    digest.update(keys)
    return digest.hexdigest()


def identity(items: ItemSource, plan: Spans) -> Identity:
    """Shard k -> the digest of its items as the source tells them now (items.keys: a
    tree's listing, an importer's planned keys, Python samples read again), what a part
    must have been made from to be reused."""
    def digest(k: int) -> str:
        lo, hi = plan.span(k)
        return span_digest(lo, hi, items.keys(lo, hi))

    return digest


class RemoteParts(Protocol):
    """Where the tasks put their parts when DST is a URL (remote_stage.RemoteStage): each part
    is built in a local folder, then uploaded."""

    def build(self, k: int, make: Callable[[Path], Part]) -> Part: ...

    def load_plan(self) -> tuple[ShardPlan, TaskSettings]: ...


Stage = Path | RemoteParts  # what the engines hand each task: a staging folder, or remote


def load_arrays(staging: Path, k: int) -> dict[str, np.ndarray]:
    """Shard k's index arrays as its task wrote them (kept listing positions, offset, length,
    shape, codec, crc32; a sample part's also its encoded columns)."""
    with np.load(part_path(staging, k, ".part.npz"), allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def check_part(staging: Path, plan: Spans, k: int, made_of: Identity | None,
               hash_shard: bool = True, sizes: Mapping[str, int] | None = None
               ) -> tuple[Part | None, str]:
    """Shard k's part when it is whole and made from the plan's items, else why not.

    made_of: the digest its items have now (identity()); None: not compared (a part this run
    wrote, or checked already). It is asked last but for the shard file's checks, so items
    are read again (Python samples) only for parts that are otherwise whole.
    sizes: the shard files' sizes when they are not in staging (a URL's listing); then only
    the size is checked: the sha256 is the one the task computed over the bytes it uploaded.
    """
    try:
        part = Part.from_json(part_path(staging, k).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "was never written (its task did not finish)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"has an unreadable part-manifest ({type(exc).__name__})"
    if (part.shard, part.lo, part.hi) != (k, *plan.span(k)):
        return None, "was made from another range of items (the source changed since)"
    npz = part_path(staging, k, ".part.npz")
    if not npz.is_file() or sha256_file(npz)[1] != part.arrays_sha256:
        return None, f"has damaged index arrays ({npz.name})"
    tiles = part_path(staging, k, tiling.SHARD_SUFFIX)
    if part.tiles_sha256 and (not tiles.is_file() or sha256_file(tiles)[1] != part.tiles_sha256):
        return None, f"has damaged tile columns ({tiles.name})"
    count = (0 if part.info is None else part.info.count) + len(part.skipped)
    if count != part.hi - part.lo:
        return None, f"counts {count} files, its plan range has {part.hi - part.lo}"
    if made_of is not None and part.digest != made_of(k):
        return None, "was made from other source items (the source changed since)"
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
