"""A Python sample's resume key, computed by its task as it prepares the sample and again, by
reading it, when --resume checks a finished part (staging/items.SampleItems.keys): what the
sample is made of, never its prepared record, so the check prepares nothing.

An importer's items are keyed at planning instead (pack/sources/hints.item_keys; a tree's
files by their listing entries: sources/formats/image_folder.TreeSamples.item_keys).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from fastloader.format.fields import FieldSpec, primary_image
from fastloader.pack.sources.hints import file_stamp, key_of
from fastloader.pack.sources.values import PreparedSample, is_pil

if TYPE_CHECKING:
    from PIL import Image


def sample_key(sample: object, files: frozenset[str], known: dict[str, int] | None = None
               ) -> bytes:
    """A Python sample's resume key (KEY_BYTES): its values, a file field's path taken as its
    path, size and mtime, bytes and arrays as their length and crc32 (a checksum, not a
    cryptographic hash, which would cost ~7% of preparing the image; a change that keeps both
    a value's length and its crc32 is missed, 1 in 2**32 by chance, as the records' own crc32
    checks go). known: the crc32 of bytes values already checksummed (a record kept as it
    came), by field name."""
    if not isinstance(sample, Mapping):
        return key_of(repr(sample)).tobytes()
    known = known or {}
    return key_of({str(k): _plain(v, k in files, known.get(k)) for k, v in sample.items()}
                  ).tobytes()


def known(sample: object, specs: Sequence[FieldSpec], prepared: PreparedSample
           ) -> dict[str, int]:
    """{image field: crc32} when the record is the field's bytes as they came (not
    re-encoded): its crc32 is theirs, so the key does not checksum them again."""
    record, name = prepared.record, primary_image(specs).name
    value = sample.get(name) if isinstance(sample, Mapping) else None
    if record.data is None or record.reencoded or not isinstance(
            value, (bytes, bytearray, memoryview)):
        return {}
    return {name: record.crc32}


def _plain(value: object, is_file: bool, crc32: int | None = None) -> object:
    """value as plain types whose repr tells it whole (numpy's repr elides long arrays)."""
    if is_file and isinstance(value, (str, os.PathLike)):
        return file_stamp(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        size = memoryview(value).nbytes
        return ["bytes", size, zlib.crc32(value) if crc32 is None else crc32]
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ["ndarray", str(value.dtype), list(value.shape), zlib.crc32(data.data)]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_plain(v, False) for v in value]]
    if isinstance(value, Mapping):
        return {str(k): _plain(v, False) for k, v in value.items()}
    if is_pil(value):  # its repr holds a memory address: keyed by its pixels instead
        return _pil(cast("Image.Image", value))
    return value


def _pil(image: Image.Image) -> list[object]:
    """A PIL image by content: mode, size, its pixels' crc32 (and its palette's, which
    the pixels of a "P" image index)."""
    palette = image.getpalette() if image.mode in ("P", "PA") else None
    return ["PIL", image.mode, list(image.size), zlib.crc32(image.tobytes()),
            None if palette is None else zlib.crc32(bytes(palette))]
