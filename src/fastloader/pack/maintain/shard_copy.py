"""How append and merge (grow.py) copy an input shard, never decoding a record: an HDF5 shard
whole with its sha256 checked, an LMDB shard rewritten under new sample numbers with each
record's crc32 checked, so a damaged input is not spread."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

from fastloader.errors import PackError
from fastloader.format.backends import backend_module
from fastloader.format.dataset import PackedDataset
from fastloader.format.manifest import ShardInfo


def copy_checked(src: Path, dst: Path, info: ShardInfo) -> None:
    """Copy a shard file, checking its sha256 on the way (a damaged input is not spread)."""
    digest = hashlib.sha256()
    tmp = dst.with_name(f".{dst.name}.tmp")
    with open(src, "rb") as reader, open(tmp, "wb") as writer:
        for block in iter(lambda: reader.read(1 << 22), b""):
            digest.update(block)
            writer.write(block)
        writer.flush()
        os.fsync(writer.fileno())
    if digest.hexdigest() != info.sha256:
        tmp.unlink()
        raise PackError(f"{src} fails its sha256 check; run `packdata verify {src.parent}` and "
                        "repack that dataset before merging it.")
    os.replace(tmp, dst)


def rekey_lmdb(ds: PackedDataset, k: int, dst: Path, start: int) -> list[int]:
    """Write shard k's records as a new LMDB shard keyed from start; their new offsets."""
    info = ds.manifest.shards[k]
    records = []
    for i in range(info.start, info.stop):
        data = bytes(ds.record(i))
        if zlib.crc32(data) != int(ds.crc32s[i]):
            raise PackError(f"{ds.describe(i)} fails its crc32 check; run `packdata verify "
                            f"{ds.root}` and repack that dataset before merging it.")
        records.append(data)
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.unlink(missing_ok=True)
    layout = backend_module("lmdb").write_shard(tmp, start, records)
    os.replace(tmp, dst)
    return list(layout.offsets)
