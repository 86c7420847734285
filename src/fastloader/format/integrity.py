"""Checks a dataset passes at open: shard files whole and in place (every open), index values
in range (the first open of an index version: format/stamps.py).

Everything here is vectorised or per shard (never per record in Python), so opening stays
cheap; what it proves lets record reads trust the index: every shard id names a shard, every
offset and length lies inside its shard file, every label names a class.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fastloader.errors import DatasetError
from fastloader.format.index import CORE_FIELDS, ORIENTATION
from fastloader.format.manifest import Codec, Manifest, member_path


def _damaged(root: Path, what: str) -> DatasetError:
    return DatasetError(
        f"{root}: {what}; the dataset is damaged: run `packdata verify {root}` and pack it again."
    )


def shard_paths(root: Path, manifest: Manifest) -> list[Path]:
    """Each shard's path, after checking that the shards tile 0..num_samples and that each file
    is a regular file inside the dataset with the size manifest.json gives (a truncated shard
    would be mapped past its end: SIGBUS on the first read of a missing page)."""
    paths = []
    expected_start = 0
    for k, shard in enumerate(manifest.shards):
        if shard.start != expected_start or shard.count < 1:
            raise _damaged(root, f"shard {k} ({shard.file!r}) covers samples from {shard.start} "
                           f"({shard.count} records), expected {expected_start} and at least 1")
        expected_start = shard.stop
        path = member_path(root, shard.file)
        size = os.stat(path).st_size
        if size != shard.bytes:
            raise _damaged(root, f"shard {shard.file!r} is {size} bytes on disk, manifest.json "
                           f"says {shard.bytes} (truncated or replaced)")
        if manifest.backend == "hdf5" and (shard.data_offset is None
                                           or shard.data_offset >= shard.bytes):
            raise _damaged(root, f"shard {shard.file!r} has records at file offset "
                           f"{shard.data_offset}, not inside its {shard.bytes} bytes")
        paths.append(path)
    if expected_start != manifest.num_samples:
        raise _damaged(root, f"the shards hold {expected_start} records, manifest.json says "
                       f"{manifest.num_samples}")
    return paths


CHUNK = 1 << 20  # rows a rule checks at once: its temporaries stay ~10 MB at any dataset size

Rule = Callable[[slice], np.ndarray]  # rows -> a bool per row: True where the rule breaks


def _first_bad(root: Path, name: str, rows: int, bad: Rule, rule: str) -> None:
    """Check `bad` over rows 0..rows chunk by chunk; DatasetError naming the first bad row."""
    total, first = 0, -1
    for start in range(0, rows, CHUNK):
        where = np.flatnonzero(bad(slice(start, min(rows, start + CHUNK))))
        if where.size and first < 0:
            first = start + int(where[0])
        total += where.size
    if total:
        raise _damaged(root, f"index field {name!r} breaks its rule ({rule}) at {total} "
                       f"records, the first being record {first}")


def check_dtypes(root: Path, manifest: Manifest) -> None:
    """The core fields have the dtypes the format fixes (manifest.json could say otherwise)."""
    for name, dtype in CORE_FIELDS.items():
        info = manifest.fields.get(name)
        if info is not None and info.dtype != dtype:
            raise _damaged(root, f"index field {name!r} is listed as {info.dtype!r:.40}, the "
                           f"format stores {dtype}")


def check_index(root: Path, manifest: Manifest, arrays: dict[str, np.ndarray]) -> None:
    """Every per-record value lies in its range (arrays: the core fields by name, and the EXIF
    orientations where the dataset has them; their shape is the caller's). Each rule
    runs over the whole index before the next (the first broken rule is reported, as one pass
    over each array would), in chunks of CHUNK rows, so its memory does not grow with n."""
    shards, n = manifest.shards, manifest.num_samples
    counts = np.array([s.count for s in shards], np.int64)
    sizes = np.array([s.bytes for s in shards], np.int64)
    stops = np.cumsum(counts)
    shard, offset, length = arrays["shard"], arrays["offset"], arrays["length"]
    _first_bad(root, "shard", n, lambda r: shard[r] != np.searchsorted(
        stops, np.arange(r.start, r.stop), side="right"),
        "records lie in the shard whose range manifest.json gives them")
    # A v2 dataset without a label field stores label 0 for every sample (and no classes).
    classes = max(len(manifest.classes), 1 if manifest.version >= 2 else 0)
    label = arrays["label"]
    _first_bad(root, "label", n, lambda r: (label[r] < 0) | (label[r] >= classes),
               f"0 <= label < {classes} classes")
    _first_bad(root, "length", n, lambda r: (length[r] <= 0) | (length[r] > sizes[shard[r]]),
               "0 < length <= its shard's size")
    if manifest.backend == "lmdb":  # offset is the record's key: key_start + its place
        keys = np.array([s.key_start for s in shards], np.int64)

        def bad_key(r: slice) -> np.ndarray:
            key, first = offset[r], keys[shard[r]]
            return ~((key >= first) & (key < first + counts[shard[r]]))
        _first_bad(root, "offset", n, bad_key, "an LMDB key inside its shard's range")
    else:
        data = np.array([s.data_offset or 0 for s in shards], np.int64)

        def bad_place(r: slice) -> np.ndarray:
            at, room = offset[r], sizes[shard[r]] - data[shard[r]]
            return ~((at >= 0) & (at <= room) & (length[r] <= room - np.minimum(at, room)))
        _first_bad(root, "offset", n, bad_place, "offset + length inside its HDF5 shard")
    codec = arrays["codec"]
    _first_bad(root, "codec", n, lambda r: codec[r] > max(Codec),
               f"a codec 0..{int(max(Codec))}")
    shape = arrays["shape"]
    if shape.ndim != 2 or shape.shape[1] != 2:
        raise _damaged(root, f"index field 'shape' has shape {list(shape.shape)}, not (N, 2)")
    _first_bad(root, "shape", n, lambda r: np.asarray((shape[r] < 1).any(axis=1)),
               "height and width >= 1")
    _check_paths(root, arrays["path_offsets"], arrays["path_bytes"])
    orientation = arrays.get(ORIENTATION)  # pack --apply-exif-orientation: (N,) uint8
    if orientation is not None:
        _first_bad(root, ORIENTATION, n, lambda r: (orientation[r] < 1) | (orientation[r] > 8),
                   "EXIF orientations 1..8")


def _check_paths(root: Path, bounds: np.ndarray, blob: np.ndarray) -> None:
    in_order = all(not np.any(np.diff(bounds[start:start + CHUNK + 1]) < 0)
                   for start in range(0, max(bounds.size - 1, 0), CHUNK))
    if bounds.size and (bounds[0] != 0 or bounds[-1] != blob.size or not in_order):
        raise _damaged(root, "index field 'path_offsets' does not slice 'path_bytes' in order")
