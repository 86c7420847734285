"""Per-sample index arrays: one .npy per field under index/, loaded without pickle."""

from __future__ import annotations

import ctypes
import hashlib
import io
import mmap
import os
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from fastloader.errors import DatasetError
from fastloader.format.manifest import FieldInfo, Manifest, member_path

INDEX_DIR = "index"

# The fields every v1 dataset has, with their dtypes. Later format features (decode-aware
# tiles, ...) add more entries to manifest["fields"]; readers ignore fields they do not know.
CORE_FIELDS: dict[str, str] = {
    "shard": "int32",  # which shard holds the record
    "offset": "int64",  # LMDB: the record's key number; HDF5: byte offset in `records`
    "length": "int64",  # record length in bytes
    "label": "int64",
    "shape": "int32",  # (N, 2): height, width of the encoded image
    "codec": "uint8",  # Codec value
    "crc32": "uint32",  # zlib.crc32 of the record bytes
    "path_offsets": "int64",  # (N + 1,): slices of path_bytes
    "path_bytes": "uint8",  # UTF-8 (surrogateescape) relative source paths, concatenated
}


# Optional, written only by a pack with --apply-exif-orientation: uint8 (N,) EXIF orientation
# (1-8) of each image, whose "shape" is then the turned (height, width). Absent: every image as
# stored (orientation 1), as in every dataset packed without it and before it existed.
ORIENTATION = "orientation"


def encode_paths(paths: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Pack relative paths into (offsets (N+1,) int64, bytes uint8) arrays."""
    encoded = [p.encode("utf-8", "surrogateescape") for p in paths]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), np.uint8)
    return offsets, blob


def decode_path(offsets: np.ndarray, blob: np.ndarray, index: int) -> str:
    """The relative source path of sample `index`."""
    start, stop = int(offsets[index]), int(offsets[index + 1])
    return bytes(blob[start:stop]).decode("utf-8", "surrogateescape")


def decode_paths(offsets: np.ndarray, blob: np.ndarray) -> list[str]:
    """All relative source paths, in sample order."""
    data = bytes(blob)
    bounds = offsets.tolist()
    return [
        data[bounds[i] : bounds[i + 1]].decode("utf-8", "surrogateescape")
        for i in range(len(bounds) - 1)
    ]


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def write_index(
    folder: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]
) -> dict[str, FieldInfo]:
    """Write each array as folder/index/NAME.npy; return the manifest's field entries."""
    index_dir = Path(folder) / INDEX_DIR
    index_dir.mkdir(parents=True, exist_ok=True)
    fields: dict[str, FieldInfo] = {}
    for name, array in arrays.items():
        dtype = CORE_FIELDS.get(name)
        data = np.asarray(array, dtype=dtype) if dtype else np.asarray(array)
        if data.dtype == object:
            raise DatasetError(f"index field {name!r} has dtype object; only numeric arrays")
        payload = _npy_bytes(data)
        relative = f"{INDEX_DIR}/{name}.npy"
        with open(Path(folder) / relative, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        fields[name] = FieldInfo(
            file=relative,
            dtype=str(data.dtype),
            shape=list(data.shape),
            sha256=hashlib.sha256(payload).hexdigest(),
        )
    return fields


_NPY_HEADER_MAX = 1 << 16  # an .npy header is far smaller; bounds the read of a hostile file


def _expected_bytes(path: Path, name: str, info: FieldInfo) -> int:
    """Bytes of the array data manifest.json promises for field `name`."""
    try:
        dtype = np.dtype(info.dtype)
    except TypeError:
        dtype = np.dtype(object)
    if dtype.hasobject or dtype.itemsize == 0:
        raise DatasetError(
            f"{path}: manifest.json gives index field {name!r} dtype {info.dtype!r:.40}, not a "
            "numeric dtype; the dataset is damaged: pack it again."
        )
    return int(np.prod(info.shape, dtype=np.int64)) * dtype.itemsize


class Mapped:
    """One index field mapped read-only: the array (a plain ndarray over the map, no copy),
    and the fstat of the file descriptor it was mapped from (what a stamp records)."""

    def __init__(self, path: Path, name: str, array: np.ndarray, buffer: memoryview,
                 stat: os.stat_result) -> None:
        self.path, self.name, self.array, self.stat = path, name, array, stat
        self._buffer = buffer

    def advise(self, advice: int) -> None:
        """madvise the whole mapping (a map starts on a page boundary)."""
        address = np.frombuffer(self._buffer, np.uint8).__array_interface__["data"][0]
        _libc.madvise(address, len(self._buffer), advice)

    def forget_pages(self) -> None:
        """Drop the pages this process mapped (they stay in the page cache; a later read maps
        them again): after a full check, RSS holds only what reads touch next."""
        self.advise(mmap.MADV_DONTNEED)

    def check_sha256(self, root: Path, expected: str) -> None:
        """Hash the whole mapped file; DatasetError if it is not the packed one."""
        if hashlib.sha256(self._buffer).hexdigest() != expected:
            raise DatasetError(
                f"{self.path}: index field {self.name!r} fails its sha256 check (the file was "
                f"changed after packing); run `packdata verify {root}` and pack the dataset "
                "again.")


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value


def map_readonly(fd: int, size: int) -> memoryview:
    """The first size bytes of file fd, mapped shared and read-only, as a read-only buffer that
    unmaps itself when the last array over it is gone. Unlike mmap.mmap it keeps no file
    descriptor: a closed dataset holds no open file even while its arrays live on."""
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        code = ctypes.get_errno()
        raise OSError(code, f"mmap failed: {os.strerror(code)}")
    pages = (ctypes.c_char * size).from_address(address)
    unmap = weakref.finalize(pages, _libc.munmap, address, size)
    unmap.atexit = False  # at exit a daemon thread may still read it: the OS unmaps then
    return memoryview(pages).cast("B").toreadonly()  # no array over it can be made writable


def map_field(root: Path, manifest: Manifest, name: str) -> Mapped:
    """Map one index field without reading it: only its .npy header is read here. Its size,
    header, shape and dtype are checked against manifest.json; the sha256 is the caller's
    (Mapped.check_sha256), or a stamp's (format/stamps.py). DatasetError naming the file."""
    info = manifest.fields.get(name)
    if info is None:
        raise DatasetError(
            f"{root}: manifest.json lists no index field {name!r}; the dataset is damaged or "
            "from an incompatible packer: pack it again."
        )
    path = member_path(root, info.file)
    expected = _expected_bytes(path, name, info)
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())  # the file mapped is the file stamped
            size = stat.st_size
            if not expected <= size <= expected + _NPY_HEADER_MAX:
                raise DatasetError(
                    f"{path}: index field {name!r} is {size} bytes, manifest.json promises "
                    f"{expected} bytes of data; the dataset is damaged: pack it again."
                )
            shape, fortran, dtype = _parse_header(handle)
            start = handle.tell()
            buffer = map_readonly(handle.fileno(), size)
        count = int(np.prod(shape, dtype=np.int64))
        if start + count * dtype.itemsize > size:
            raise ValueError(f"the file ends before its {count} values")
        flat = np.frombuffer(buffer, dtype, count=count, offset=start)
        array = flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)
    except (OSError, ValueError) as exc:
        raise DatasetError(
            f"{path}: cannot load index field {name!r} ({exc}); run `packdata verify {root}` "
            "and pack again if it is damaged."
        ) from None
    if list(array.shape) != list(info.shape) or str(array.dtype) != info.dtype:
        raise DatasetError(
            f"{path}: index field {name!r} has shape {list(array.shape)} dtype {array.dtype}, "
            f"manifest says {info.shape} {info.dtype}; the dataset is damaged: pack it again."
        )
    return Mapped(path, name, array, buffer, stat)


def load_field(
    root: Path, manifest: Manifest, name: str, mmap: bool = True, check_sha256: bool = True
) -> np.ndarray:
    """One index field (memory-mapped by default, else a copy in memory) after checking its
    sha256 against manifest.json; DatasetError if it is missing, outside the dataset, edited
    or malformed. check_sha256=False is for verify, which reports a mismatch itself."""
    mapped = map_field(root, manifest, name)
    if check_sha256:
        mapped.check_sha256(root, manifest.fields[name].sha256)
    return mapped.array if mmap else np.array(mapped.array)


def _parse_header(handle: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """An .npy header's (shape, fortran_order, dtype), with every way numpy's parser fails
    as ValueError: a damaged header raises SyntaxError, tokenize.TokenError... from numpy."""
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            header = np.lib.format.read_array_header_1_0(handle, max_header_size=_NPY_HEADER_MAX)
        elif version in ((2, 0), (3, 0)):
            header = np.lib.format.read_array_header_2_0(handle, max_header_size=_NPY_HEADER_MAX)
        else:
            raise ValueError(f"npy version {version}")
    except OSError:
        raise
    except Exception as exc:
        raise ValueError(f"not a valid .npy file: {type(exc).__name__}: {exc}") from None
    shape, fortran, dtype = header
    if dtype.hasobject:
        raise ValueError("not a valid .npy file: it holds Python objects")
    return tuple(int(n) for n in shape), bool(fortran), dtype
