"""Decode-aware packing inside pack(): repack each JPEG as a restart-tiled record, keep its table.

A tiled dataset stores, per sample, the tiled JPEG as its record (crc32 over those bytes) and
four extra index fields: tiles_header (n, 9) int64 in tiles.HEADER_FIELDS order (all zeros:
the record is not tiled and keeps its original bytes), tiles_offsets (flat uint32, every tiled
record's segment offsets one after another), tiles_start (n + 1,) uint64 prefix sums into
tiles_offsets, and source_crc32 (n,) uint32, the crc32 of the bytes that were repacked (so
`packdata verify --decode --source DIR` can tell whether a source file is still the one packed).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fastloader.decode import tiles
from fastloader.errors import NativeUnavailableError, PackError, invalid_type
from fastloader.format.manifest import Codec
from fastloader.pack.sources.validate import Prepared

TILES_VERSION = 1
INDEX_FIELDS = ("tiles_header", "tiles_offsets", "tiles_start", "source_crc32")
SHARD_SUFFIX = ".tiles.npz"  # per-shard tile columns in the staging journal


def check_tiles_option(tiles_on: object, restart_mcus: object) -> dict[str, int] | None:
    """The manifest's tiles option for pack(tiles=..., restart_mcus=...), or None when off.

    Raises PackError naming how to build the extension when tiles are asked without it.
    """
    if not isinstance(tiles_on, bool):
        raise invalid_type("tiles", tiles_on, "a bool")
    limit = tiles.check_restart_mcus(restart_mcus)
    if not tiles_on:
        return None
    try:
        tiles.require_extension()
    except NativeUnavailableError as exc:
        raise PackError(f"tiles=True needs the native extension: {exc}") from None
    return {"version": TILES_VERSION, "restart_mcus": limit}


def tile_record(prepared: Prepared, restart_mcus: int = tiles.DEFAULT_RESTART_MCUS
                ) -> Prepared:
    """A prepared record (of any source) repacked losslessly as restart tiles when it is a
    JPEG that can be (others keep their bytes); a refused one as it is."""
    if prepared.data is None:
        return prepared
    untiled = prepared._replace(source_crc32=prepared.crc32)
    if prepared.codec != Codec.JPEG:
        return untiled
    record = tiles.repack(prepared.data, restart_mcus=restart_mcus)
    if record is None:  # arithmetic coding, lossless, 12-bit...: keep the bytes, decode normally
        return untiled
    header, offsets = record.table.to_arrays()
    return untiled._replace(
        data=record.data,
        crc32=zlib.crc32(record.data),
        tile_header=header,
        tile_offsets=offsets,
    )


class TileColumns:
    """Collects one shard's tile columns while its records are added."""

    def __init__(self) -> None:
        self.headers: list[np.ndarray] = []
        self.offsets: list[np.ndarray] = []
        self.source_crc32: list[int] = []

    def add(self, prepared: Prepared) -> None:
        if prepared.tile_header is None or prepared.tile_offsets is None:
            self.headers.append(np.zeros(len(tiles.HEADER_FIELDS), np.int64))
            self.offsets.append(np.zeros(0, np.uint32))
        else:
            self.headers.append(np.asarray(prepared.tile_header, np.int64))
            self.offsets.append(np.asarray(prepared.tile_offsets, np.uint32))
        self.source_crc32.append(prepared.source_crc32)

    def take(self) -> dict[str, np.ndarray]:
        """This shard's columns as arrays (headers, offsets, counts, source_crc32); then reset."""
        width = len(tiles.HEADER_FIELDS)
        columns = {
            "headers": np.asarray(self.headers, np.int64).reshape(-1, width),
            "offsets": np.concatenate(self.offsets) if self.offsets else np.zeros(0, np.uint32),
            "counts": np.asarray([o.size for o in self.offsets], np.int64),
            "source_crc32": np.asarray(self.source_crc32, np.uint32),
        }
        self.__init__()  # type: ignore[misc]
        return columns


def load_columns(journal: Path, shard_id: int) -> dict[str, np.ndarray] | None:
    """A journaled shard's tile columns, or None when missing or unreadable."""
    path = journal / f"{shard_id:05d}{SHARD_SUFFIX}"
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in ("headers", "offsets", "counts", "source_crc32")}
    except (OSError, ValueError, KeyError):
        return None


def index_fields(shards: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The dataset's tile index fields from every shard's columns, in sample order."""
    width = len(tiles.HEADER_FIELDS)
    counts = np.concatenate([s["counts"] for s in shards]) if shards else np.zeros(0, np.int64)
    start = np.zeros(counts.size + 1, np.uint64)
    np.cumsum(counts, out=start[1:])
    return {
        "tiles_header": np.concatenate([s["headers"] for s in shards]).reshape(-1, width),
        "tiles_offsets": np.concatenate([s["offsets"] for s in shards]).astype(np.uint32),
        "tiles_start": start,
        "source_crc32": np.concatenate([s["source_crc32"] for s in shards]).astype(np.uint32),
    }


def tile_stats(fields: dict[str, np.ndarray]) -> dict[str, int]:
    """How many records are tiled and how many kept their bytes (not tileable)."""
    tiled = int(np.count_nonzero(fields["tiles_header"].any(axis=1)))
    return {"tiled": tiled, "untiled": int(fields["tiles_header"].shape[0]) - tiled}
