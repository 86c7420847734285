"""Per-file packing work (runs in pool workers): read, validate with Pillow, maybe re-encode."""

from __future__ import annotations

import io
import zlib
from typing import Any, NamedTuple

from PIL import Image, UnidentifiedImageError

from fastloader.format.manifest import Codec


class Prepared(NamedTuple):
    """One file's outcome: the record to store, or the reason it was rejected."""

    data: bytes | None
    height: int
    width: int
    codec: int
    crc32: int
    error: str | None
    reencoded: bool
    # Set by pack/tiling.py's prepare_tiled (tiled packs only).
    tile_header: Any = None  # int64[9] in tiles.HEADER_FIELDS order, None: not tiled
    tile_offsets: Any = None  # uint32 segment offsets
    source_crc32: int = 0  # crc32 of the bytes that were repacked


def _reject(reason: str) -> Prepared:
    return Prepared(None, 0, 0, int(Codec.UNKNOWN), 0, reason, False)


def check_image(data: bytes) -> tuple[Codec, int, int]:
    """Decode data with Pillow to prove it is whole; return (codec, height, width).

    Raises whatever Pillow raises for empty, truncated or garbage input.
    """
    with Image.open(io.BytesIO(data)) as image:
        codec = Codec.from_pillow(image.format)
        width, height = image.size  # from the header, before any draft scaling
        if image.format == "JPEG":
            # A 1/8-scale DCT decode still entropy-decodes every scan, so truncation and
            # corrupt Huffman data fail as they would at full size, for a fraction of the cost.
            image.draft(image.mode, (max(1, width // 8), max(1, height // 8)))
        image.load()
    return codec, height, width


def reencode(data: bytes, max_side: int, quality: int) -> tuple[bytes, int, int]:
    """Shrink an image so its longer side is max_side and store it as JPEG at quality."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        scale = max_side / max(width, height)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        if image.format == "JPEG":
            image.draft("RGB" if image.mode == "CMYK" else image.mode, size)
        converted = image if image.mode in ("RGB", "L") else image.convert("RGB")
        resized = converted.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    buffer = io.BytesIO()
    resized.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue(), size[1], size[0]


def prepare(path: str, max_side: int | None = None, quality: int = 90) -> Prepared:
    """Read the file at path and return its record; never raises for a bad file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return _reject(f"cannot read: {exc.strerror or exc}")
    if not data:
        return _reject("empty file")
    try:
        codec, height, width = check_image(data)
        reencoded = False
        if max_side is not None and max(height, width) > max_side:
            data, height, width = reencode(data, max_side, quality)
            codec, reencoded = Codec.JPEG, True
    except UnidentifiedImageError:
        return _reject("not an image Pillow recognises (unknown or garbage header)")
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, bomb errors...
        return _reject(f"not a decodable image: {type(exc).__name__}: {exc}")
    return Prepared(data, height, width, int(codec), zlib.crc32(data), None, reencoded)
