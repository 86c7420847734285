"""verify() for tiled records: the table matches the bytes, spliced crops equal the full decode.

What is checked for each record whose index row says it is tiled:
- always (native extension needed): scanning the record's restart markers gives exactly the
  stored table (geometry and every segment offset), so a splice can trust the index;
- with decode: a seeded random crop decoded from the spliced JPEG equals the same crop of the
  full decode (what the loader relies on);
- with decode and a source folder: when SOURCE/relpath still holds the bytes that were packed
  (same crc32 as recorded at pack time), the record's full decode equals the source's pixels
  exactly (the repack is lossless). Sources that are gone or changed (or were re-encoded by
  --max-side) are counted as not compared, not as damage.
"""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import numpy as np

from fastloader.decode import tiles
from fastloader.errors import FastloaderError, NativeUnavailableError


def native_available() -> bool:
    """Whether the tile checks can run (they need the compiled extension)."""
    try:
        tiles.require_extension()
    except NativeUnavailableError:
        return False
    return True


def _pixels(data: bytes | memoryview) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        array = np.asarray(image)
    return array if array.ndim == 3 else array[:, :, None]


def _random_crop(table: tiles.TileTable, seed: int) -> tuple[int, int, int, int]:
    rng = np.random.default_rng([seed, table.height, table.width])
    height = int(rng.integers(1, table.height + 1))
    width = int(rng.integers(1, table.width + 1))
    top = int(rng.integers(0, table.height - height + 1))
    left = int(rng.integers(0, table.width - width + 1))
    return top, left, height, width


def table_problem(data: bytes | memoryview, table: tiles.TileTable) -> str | None:
    """Why the stored table does not describe the record's bytes, or None."""
    try:
        scanned = tiles.scan(data)
    except FastloaderError as exc:
        return f"is marked tiled but is not a valid tiled record ({exc})"
    stored_header, stored_offsets = table.to_arrays()
    scanned_header, scanned_offsets = scanned.to_arrays()
    if not np.array_equal(stored_header, scanned_header):
        return "tile table geometry in the index disagrees with the record"
    if not np.array_equal(stored_offsets, scanned_offsets):
        return "tile segment offsets in the index disagree with the record's restart markers"
    return None


def decode_problem(data: bytes | memoryview, table: tiles.TileTable, seed: int) -> str | None:
    """Why a spliced random crop differs from the full decode's crop, or None."""
    top, left, height, width = box = _random_crop(table, seed)
    try:
        full = _pixels(data)[top : top + height, left : left + width]
        mode = {1: "L", 3: "RGB", 4: "CMYK"}.get(full.shape[2], "RGB")
        crop = tiles.decode_crop(data, table, box, mode=mode)
    except (FastloaderError, OSError, ValueError) as exc:
        return f"spliced crop {box} does not decode ({exc})"
    if crop.shape != full.shape or not np.array_equal(crop, full):
        return f"spliced crop {box} differs from the full decode inside the crop"
    return None


def source_problem(data: bytes | memoryview, source: Path, source_crc32: int
                   ) -> tuple[bool, str | None]:
    """(compared, problem): the record's pixels against the packed source file's."""
    try:
        original = source.read_bytes()
    except OSError:
        return False, None
    if zlib.crc32(original) != source_crc32:
        return False, None
    try:
        same = np.array_equal(_pixels(original), _pixels(data))
    except (OSError, ValueError) as exc:
        return True, f"cannot compare with its source {source} ({exc})"
    if not same:
        return True, f"decodes to different pixels than its source {source} (repack not lossless)"
    return True, None
