"""A sample's size hint: its image's bytes known without preparing it (a file's size by stat,
a TarMember's size, len(bytes), an ndarray's nbytes), what the shard plan cuts an importer's
samples by; and its item key: what the sample is made of (its values, its files' paths, sizes
and mtimes), so --resume rebuilds only the shards whose items changed."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from fastloader.pack.sources.types import Indexed
from fastloader.pack.sources.values import ParquetCell, TarMember


def size_hint(value: object) -> int:
    """A sample's records value's size (an image's, a clip's) known without reading it: 0
    when unknown (a missing file)."""
    if isinstance(value, (TarMember, ParquetCell)):  # a Parquet cell: its row group's per row
        return int(value.size)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (str, os.PathLike)):
        try:
            return int(os.stat(value).st_size)
        except (OSError, ValueError):
            return 0
    return 0


def size_hints(samples: Indexed, image: str) -> np.ndarray:
    """int64 size hints of an importer's samples (a sequence of dicts, read here: importer
    code, never a user's __getitem__); a sequence may give them itself (size_hints(): COCO's
    MaskedSamples, groups.TarSamples), without building each sample."""
    if hasattr(samples, "size_hints"):
        return np.asarray(samples.size_hints(), np.int64)
    hints = np.zeros(len(samples), np.int64)
    for i in range(hints.size):
        sample = samples[i]
        if isinstance(sample, dict):
            hints[i] = size_hint(sample.get(image))
    return hints


KEY_BYTES = 16  # an item's key in the plan (plan/keys.npy): a blake2b digest


def item_keys(samples: Indexed, files: Iterable[str]) -> np.ndarray | None:
    """uint8 (n, KEY_BYTES): each importer sample's identity (samples.item_keys() where the
    sequence knows it cheaper, e.g. from a tar's headers), else a hash of the sample's values
    with the fields named in `files` (image and mask paths) taken as their file's path, size
    and mtime; None when the sequence cannot tell its items (then the source's fingerprint
    decides for every shard)."""
    if hasattr(samples, "item_keys"):
        return samples.item_keys()
    names = frozenset(files)
    keys = np.empty((len(samples), KEY_BYTES), np.uint8)
    for i in range(len(samples)):
        keys[i] = key_of(_canonical(samples[i], names))
    return keys


def sizes_and_keys(samples: Indexed, image: str, files: Iterable[str]
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """(size_hints, item_keys) of an importer's samples, in one pass where the sequence gives
    neither itself: each sample built once and each of its files stat'ed once (an image
    file's size hint is its key's stamp)."""
    if hasattr(samples, "size_hints") or hasattr(samples, "item_keys"):
        return size_hints(samples, image), item_keys(samples, files)
    names = frozenset(files)
    sizes = np.zeros(len(samples), np.int64)
    keys = np.empty((sizes.size, KEY_BYTES), np.uint8)
    for i in range(sizes.size):
        sample = samples[i]
        plain = _canonical(sample, names)
        keys[i] = key_of(plain)
        if isinstance(sample, dict):
            value = sample.get(image)
            stamped = image in names and isinstance(value, (str, Path))
            stamp = plain[image] if stamped and isinstance(plain, dict) else None
            sizes[i] = (stamp[1] or 0) if isinstance(stamp, list) else size_hint(value)
    return sizes, keys


def key_of(value: object) -> np.ndarray:
    """The KEY_BYTES key of a value of plain types (its repr: an importer builds its samples
    in a fixed order, so the same item always reads the same; cheaper than sorted JSON)."""
    digest = hashlib.blake2b(repr(value).encode(), digest_size=KEY_BYTES).digest()
    return np.frombuffer(digest, np.uint8)


def file_stamp(path: str | os.PathLike[str]) -> list[str | int | None]:
    """[path, size, mtime_ns] of a file, or [path, None] when it cannot be stat'ed."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return [os.fspath(path), None]
    return [os.fspath(path), info.st_size, info.st_mtime_ns]


def _canonical(sample: object, files: frozenset[str]) -> str | dict[str, object]:
    """A sample as plain values: files (by name) stamped, bytes and arrays hashed."""
    if not isinstance(sample, dict):
        return repr(sample)
    return {str(name): _value(value, name in files) for name, value in sample.items()}


def _value(value: object, is_file: bool) -> object:
    if isinstance(value, TarMember):
        return [*value, *file_stamp(value.tar)[1:]]
    if is_file and isinstance(value, (str, Path)):
        return file_stamp(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ["bytes", hashlib.sha256(value).hexdigest()]
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value).tobytes()
        return ["ndarray", str(value.dtype), list(value.shape), hashlib.sha256(data).hexdigest()]
    if isinstance(value, Path):
        return str(value)
    return value
