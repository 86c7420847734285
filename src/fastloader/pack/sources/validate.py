"""Per-file packing work (runs in pool workers): read (a path, a URL, a listed tree's file),
validate with the loader's decoder or Pillow, maybe re-encode."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import stat
import sys
import tempfile
import warnings
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from PIL import Image, UnidentifiedImageError

from fastloader.decode import _native
from fastloader.decode import decode as decoder
from fastloader.decode.pillow import BitDepthWarning, depth_note, image_orientation, to_rgb
from fastloader.errors import DecodeError
from fastloader.format.kinds import BadValue
from fastloader.format.manifest import Codec
from fastloader.format.remote import is_url
from fastloader.pack.sources.types import StorageOptions

if TYPE_CHECKING:
    import numpy as np

# Largest source file read (packdata --max-file-size): bounds each pool worker's memory, and a
# huge file (a 6 GB sparse "image") is listed in skipped.json instead of exhausting it.
DEFAULT_MAX_FILE_SIZE = 256 << 20
# Third-party warnings about a file that packs all the same (Pillow's, libtiff's ...): one
# message per file here (packdata counts them in its summary), never loose on stderr.
WARNED_LOG = logging.getLogger("fastloader.pack.warnings")
_MAX_WARNINGS = 8  # distinct messages kept per file (a broken TIFF repeats one per tag)
_MAX_WARNING_CHARS = 300


class Prepared(NamedTuple):
    """One file's outcome: the record to store, or the reason it was rejected."""

    data: bytes | None
    height: int
    width: int
    codec: int
    crc32: int
    error: str | None
    reencoded: bool
    # Set by pack/sources/tiling.py's tile_record (tiled packs only).
    # int64[9] in tiles.HEADER_FIELDS order, None: not tiled
    tile_header: np.ndarray | None = None
    tile_offsets: np.ndarray | None = None  # uint32 segment offsets
    source_crc32: int = 0  # crc32 of the bytes that were repacked
    orientation: int = 1  # EXIF orientation (read with --apply-exif-orientation only)
    warnings: tuple[str, ...] = ()  # what the decoders warned about while checking it


def reject(reason: str) -> Prepared:
    """A refused item: no data, and why."""
    return Prepared(None, 0, 0, int(Codec.UNKNOWN), 0, reason, False)


def check_image(data: bytes, orientation: bool = False) -> tuple[Codec, int, int, int]:
    """Decode data as the loader will to prove it is whole; return (codec, height, width,
    EXIF orientation): the stored size, and the orientation exif_transpose would apply when
    asked (else 1).

    JPEGs go through the loader's own decoder when the native core is built (a libjpeg warning
    that damages pixels, such as corrupt data, is an error there, while Pillow returns grey
    pixels for it); other
    images, or JPEGs without the core, through Pillow as the loader's fallback does. Raises
    whatever Pillow raises, or DecodeError, for empty, truncated or garbage input.
    """
    with Image.open(io.BytesIO(data)) as image:
        codec = Codec.from_pillow(image.format)
        width, height = image.size  # from the header, before any draft scaling
        if codec == Codec.JPEG and _native.native_module() is not None:
            # A 1/8-scale decode still entropy-decodes every scan: damage anywhere is found.
            decoder.decode(data, size=decoder.check_size(height, width))
            return codec, height, width, image_orientation(image, warn=True) if orientation else 1
        if image.format == "JPEG":
            # A 1/8-scale DCT decode still entropy-decodes every scan, so truncation and
            # corrupt Huffman data fail as they would at full size, for a fraction of the cost.
            image.draft(image.mode, (max(1, width // 8), max(1, height // 8)))
        deeper = depth_note(image)  # (read before the load drops the tiles' raw modes)
        if deeper is not None:
            warnings.warn(deeper, BitDepthWarning, stacklevel=1)
        image.load()  # (a PNG's EXIF may follow its pixels: read after them)
        return codec, height, width, image_orientation(image, warn=True) if orientation else 1


def read_source(path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file at path, at most max_bytes; OSError/ValueError otherwise.

    Opened without blocking (a FIFO put in place after the scan would wait for a writer
    forever) and checked to be a regular file before reading (a link to /dev/zero never ends).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file (a FIFO, device or socket); nothing to pack")
        if info.st_size > max_bytes:
            raise ValueError(f"{info.st_size} bytes, over the --max-file-size cap of {max_bytes}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew since the stat
        raise ValueError(f"more than {max_bytes} bytes, over the --max-file-size cap")
    return data


def reencode(data: bytes, max_side: int, quality: int) -> tuple[bytes, int, int]:
    """Shrink an image so its longer side is max_side and store it as JPEG at quality."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        scale = max_side / max(width, height)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        if image.format == "JPEG":
            image.draft("RGB" if image.mode == "CMYK" else image.mode, size)
        converted = image if image.mode in ("RGB", "L") else to_rgb(image)
        resized = converted.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    buffer = io.BytesIO()
    resized.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue(), size[1], size[0]


def read_url(url: str, max_bytes: int, storage_options: StorageOptions | None) -> bytes:
    """The bytes of the object at url (fsspec), at most max_bytes; OSError/ValueError otherwise.

    One ranged read of max_bytes + 1 bytes (one request; the listing already refused objects
    listed over the cap): an object grown since is found without reading it whole.
    """
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    try:
        try:
            data = bytes(fs.cat_file(path, start=0, end=max_bytes + 1))
        except FileNotFoundError:
            raise
        except OSError:  # S3 refuses every range of an empty object: its size, then read it
            size = int(fs.size(path) or 0)
            if size > max_bytes:
                raise ValueError(f"{size} bytes, over the --max-file-size cap of {max_bytes}"
                                 ) from None
            data = bytes(fs.cat_file(path))
    except (OSError, ValueError):
        raise
    except Exception as exc:  # a storage client's own errors: the object is unreadable
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
    if len(data) > max_bytes:  # grew since the listing
        raise ValueError(f"more than {max_bytes} bytes, over the --max-file-size cap")
    return data


class ListedFile(NamedTuple):
    """A listed tree's file (sources/formats/image_folder.py): its path, or its URL (read with
    the pack's storage options), read by the worker that checks it."""

    location: str


def read_listed(file: ListedFile, max_file_size: int,
                storage_options: StorageOptions | None) -> bytes:
    """The file's bytes; BadValue saying why not in the listing's words (a tree's
    skipped.json reason: "cannot read: ...", or the size cap)."""
    try:
        if is_url(file.location):
            return read_url(file.location, max_file_size, storage_options)
        return read_source(file.location, max_file_size)
    except OSError as exc:
        raise BadValue(f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BadValue(str(exc)) from None



class _Sink:
    """This process's temporary file that fd 2 points at while a file is checked (made again
    in a forked child: a file shared with the parent would mix their texts)."""

    pid = -1
    handle = -1

    @classmethod
    def fd(cls) -> int:
        if cls.pid != os.getpid():
            if cls.handle >= 0:  # the parent's (a fork's copy): closing it here leaves theirs
                os.close(cls.handle)
            cls.handle, path = tempfile.mkstemp(prefix="fastloader-warnings-")
            os.unlink(path)  # gone with the last descriptor
            cls.pid = os.getpid()
        return cls.handle


def _messages(caught: list[warnings.WarningMessage], text: bytes) -> tuple[str, ...]:
    """Distinct warnings, in order, the repeats counted: Python's, then fd 2's lines."""
    found = [f"{w.category.__name__}: {w.message}" for w in caught]
    found += [line.strip() for line in text.decode("utf-8", "replace").splitlines()
              if line.strip()]
    counts: dict[str, int] = {}
    for message in found:
        counts[message[:_MAX_WARNING_CHARS]] = counts.get(message[:_MAX_WARNING_CHARS], 0) + 1
    return tuple(m if n == 1 else f"{m} ({n} times)" for m, n in counts.items())[:_MAX_WARNINGS]


@contextlib.contextmanager
def third_party_warnings() -> Iterator[list[str]]:
    """Catch what the decoders say about one file: Python warnings (Pillow's) and what a C
    library writes on fd 2 (libtiff, libjpeg); the list is filled on exit. fd 2 is pointed at
    a temporary file meanwhile, so another thread's stderr output in that moment lands there
    too (a pack's workers are processes of one thread)."""
    found: list[str] = []
    sink = _Sink.fd()
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(sink, 2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        size = os.lseek(sink, 0, os.SEEK_CUR)
        text = os.pread(sink, size, 0) if size else b""
        if size:
            os.ftruncate(sink, 0)
            os.lseek(sink, 0, os.SEEK_SET)
        found.extend(_messages(caught, text))


def prepare_data(data: bytes, max_side: int | None = None, quality: int = 90,
                 apply_exif_orientation: bool = False) -> Prepared:
    """The record of image bytes (checked, maybe re-encoded; with apply_exif_orientation its
    EXIF orientation read, the record's pixels and size left as stored), with what the
    decoders warned about (a refusal's reason ends with them); never raises for bad bytes."""
    if not data:
        return reject("empty file")
    with third_party_warnings() as said:
        prepared = _checked(data, max_side, quality, apply_exif_orientation)
    if not said:
        return prepared
    if prepared.data is None:
        return reject(f"{prepared.error} (the decoder also warned: {'; '.join(said)})")
    return prepared._replace(warnings=tuple(said))


def _checked(data: bytes, max_side: int | None, quality: int,
             apply_exif_orientation: bool) -> Prepared:
    try:
        codec, height, width, orientation = check_image(data, apply_exif_orientation)
        reencoded = False
        if max_side is not None and max(height, width) > max_side:
            data, height, width = reencode(data, max_side, quality)
            codec, reencoded = Codec.JPEG, True
    except DecodeError as exc:
        # Pillow opens such a file without a word (it hides libjpeg's warnings), so say
        # what is wrong: a user who checked it with Pillow blames its metadata
        return reject(f"truncated or corrupt JPEG: its compressed pixels, not its metadata, "
                      f"are damaged (Pillow opens it without a word, showing the damage as "
                      f"grey or noise); the loader's decoder says: {exc}")
    except UnidentifiedImageError:
        return reject("not an image Pillow recognises (unknown or garbage header)")
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, bomb errors...
        return reject(f"not a decodable image: {type(exc).__name__}: {exc}")
    return Prepared(data, height, width, int(codec), zlib.crc32(data), None, reencoded,
                    orientation=orientation)
