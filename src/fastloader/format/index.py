"""Per-sample index arrays: one .npy per field under index/, loaded without pickle."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

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


def load_field(
    root: Path, manifest: Manifest, name: str, mmap: bool = True, check_sha256: bool = True
) -> np.ndarray:
    """Load one index field (memory-mapped by default) after checking its sha256 against
    manifest.json; DatasetError if it is missing, outside the dataset, edited or malformed.
    check_sha256=False is for verify, which reports a mismatch itself and reads on."""
    info = manifest.fields.get(name)
    if info is None:
        raise DatasetError(
            f"{root}: manifest.json lists no index field {name!r}; the dataset is damaged or "
            "from an incompatible packer: pack it again."
        )
    path = member_path(root, info.file)
    expected = _expected_bytes(path, name, info)
    try:
        size = path.stat().st_size
        if not expected <= size <= expected + _NPY_HEADER_MAX:
            raise DatasetError(
                f"{path}: index field {name!r} is {size} bytes, manifest.json promises "
                f"{expected} bytes of data; the dataset is damaged: pack it again."
            )
        payload = None if mmap else path.read_bytes()
        if not check_sha256:
            digest = ""
        elif payload is not None:
            digest = hashlib.sha256(payload).hexdigest()
        else:
            digest = _sha256(path)
        if check_sha256 and digest != info.sha256:
            raise DatasetError(
                f"{path}: index field {name!r} fails its sha256 check (the file was changed "
                f"after packing); run `packdata verify {root}` and pack the dataset again."
            )
        source = path if payload is None else io.BytesIO(payload)
        array = _parse_npy(source, mmap)
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
    return array


def _parse_npy(source: Path | io.BytesIO, mmap: bool) -> np.ndarray:
    """np.load, with every way its header parser fails as ValueError: a damaged header
    raises SyntaxError, tokenize.TokenError, MemoryError (a huge shape)... from numpy."""
    try:
        array: np.ndarray = np.load(source, mmap_mode="r" if mmap else None, allow_pickle=False)
    except OSError:
        raise
    except Exception as exc:
        raise ValueError(f"not a valid .npy file: {type(exc).__name__}: {exc}") from None
    return array


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
