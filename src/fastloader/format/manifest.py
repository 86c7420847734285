"""The dataset's manifest.json: what a packed dataset holds and how to read it (format v1, v2).

v2 adds `sample_fields`, the declared fields in order (format/fields.py); a v1 dataset is the
fields image + label (its classes)."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from fastloader.errors import DatasetError, DatasetNotFoundError
from fastloader.format.not_packed import source_advice

FORMAT_NAME = "fastloader-packed"
FORMAT_VERSION = 2
VERSIONS = (1, 2)  # v1: ImageFolder datasets (image + label); v2: declared sample_fields
MANIFEST_NAME = "manifest.json"
BACKENDS = ("lmdb", "hdf5")


class Codec(enum.IntEnum):
    """How a record's bytes are encoded (stored per sample as uint8 in the index)."""

    UNKNOWN = 0
    JPEG = 1
    PNG = 2
    WEBP = 3
    BMP = 4
    GIF = 5
    TIFF = 6
    PPM = 7
    COEFFS = 8  # a coeffs record (issue 30): a JPEG's coefficients, fastloader.decode.coeffs

    @classmethod
    def from_pillow(cls, pillow_format: str | None) -> Codec:
        """Map Pillow's Image.format name ("JPEG", "MPO", "PNG", ...) to a Codec."""
        name = (pillow_format or "").upper()
        aliases = {"MPO": "JPEG", "JPEG2000": "UNKNOWN"}
        name = aliases.get(name, name)
        return cls.__members__.get(name, cls.UNKNOWN)


@dataclass
class ShardInfo:
    """One shard file: its sample range and what verify checks it against."""

    file: str
    start: int
    count: int
    bytes: int
    sha256: str
    data_offset: int | None = None  # HDF5: file offset of the contiguous records dataset
    # LMDB: the key of the shard's first record when it is not `start` (a shard packed as an
    # independent task keys its records from its place in the shard plan, known before the
    # files before it are read; skipped files there make its start smaller). Omitted if None.
    first_key: int | None = None

    @property
    def stop(self) -> int:
        return self.start + self.count

    @property
    def key_start(self) -> int:
        """LMDB: the key of the first record (records are keyed key_start, key_start + 1...)."""
        return self.start if self.first_key is None else self.first_key


@dataclass
class FieldInfo:
    """One per-sample index array stored as its own .npy (extra fields may be added later)."""

    file: str
    dtype: str
    shape: list[int]
    sha256: str


@dataclass
class Manifest:
    """Everything manifest.json says; written last, so its presence means the dataset is whole.

    Read one with fastloader.format.manifest.read_manifest(path), or from
    PackedDataset.manifest; pack() returns the one it wrote.

    Attributes:
        backend: "lmdb" or "hdf5".
        num_samples: records in the dataset.
        classes: class names; label k is classes[k].
        shards: each shard file's name, record count, bytes and sha256.
        fields: the per-sample index arrays (one .npy each) and their dtypes.
        options: how it was packed (shard_size, max_side, quality, tiles).
        stats: what packing found (files found, packed, skipped, re-encoded, ...).
        sample_fields: (v2) the declared fields in order, each {"name", "kind", ...}.
    """

    backend: str
    num_samples: int
    classes: list[str]
    shards: list[ShardInfo]
    fields: dict[str, FieldInfo]
    options: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""
    created_at: str = ""
    format: str = FORMAT_NAME
    version: int = 1
    sample_fields: list[dict[str, object]] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(shard.bytes for shard in self.shards)

    def to_json(self) -> str:
        """The manifest as indented JSON text (stable key order)."""
        raw = dataclasses.asdict(self)
        if self.version == 1:  # a v1 manifest stays exactly what v1 readers know
            raw.pop("sample_fields")
        for shard in raw["shards"]:  # only where a key does not follow from start
            if shard["first_key"] is None:
                shard.pop("first_key")
        return json.dumps(raw, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "manifest.json") -> Manifest:
        """Parse manifest JSON text; DatasetError naming `where` if it is not a v1 manifest."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{where} is not valid JSON ({exc.msg} at line {exc.lineno}); "
                "the dataset is damaged: pack it again."
            ) from None
        except RecursionError:  # hostile nesting: json recurses once per level
            raise DatasetError(
                f"{where} nests too deeply to be a manifest; the dataset is damaged: pack it again."
            ) from None
        return _manifest_from_dict(raw, where)

    def write(self, folder: str | os.PathLike[str]) -> Path:
        """Write manifest.json into folder atomically (temp file, fsync, rename)."""
        path = Path(folder) / MANIFEST_NAME
        tmp = path.with_name(MANIFEST_NAME + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(self.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        return path


def _damaged(where: str, what: str) -> DatasetError:
    return DatasetError(f"{where}: {what}; the dataset is damaged: pack it again.")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# Each entry's fields and the types they must have (bool is refused where an int is asked).
_SHARD_TYPES = {"file": str, "start": int, "count": int, "bytes": int, "sha256": str}
_FIELD_TYPES = {"file": str, "dtype": str, "shape": list, "sha256": str}


def _check_entry(entry: object, types: Mapping[str, type], where: str, what: str) -> None:
    if not isinstance(entry, dict):
        raise _damaged(where, f"{what} is {type(entry).__name__}, not an object")
    for key, kind in types.items():
        value = entry.get(key)
        ok = _is_int(value) and value >= 0 if kind is int else isinstance(value, kind)
        if not ok:
            raise _damaged(where, f"{what} has {key}={value!r:.60}, expected a "
                           f"{'non-negative int' if kind is int else kind.__name__}")


def _check_types(raw: dict[str, Any], where: str) -> None:
    """Every entry the readers rely on has the type they assume, before any is used."""
    count = raw.get("num_samples")
    if not _is_int(count) or count < 0:
        raise _damaged(where, f"num_samples is {count!r:.60}, not a non-negative int")
    classes = raw.get("classes")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise _damaged(where, f"classes is {classes!r:.60}, not a list of names")
    if not isinstance(raw.get("shards"), list) or not isinstance(raw.get("fields"), dict):
        raise _damaged(where, "shards must be a list and fields an object")
    for k, shard in enumerate(raw["shards"]):
        _check_entry(shard, _SHARD_TYPES, where, f"shard {k}")
        for key in ("data_offset", "first_key"):
            value = shard.get(key)
            if value is not None and not (_is_int(value) and value >= 0):
                raise _damaged(where, f"shard {k} has {key}={value!r:.60}")
    for name, info in raw["fields"].items():
        _check_entry(info, _FIELD_TYPES, where, f"index field {name!r}")
        if not all(_is_int(n) and n >= 0 for n in info["shape"]):
            raise _damaged(where, f"index field {name!r} has shape {info['shape']!r:.60}")
    for key in ("options", "stats"):
        if not isinstance(raw.get(key, {}), dict):
            raise _damaged(where, f"{key} is {type(raw[key]).__name__}, not an object")


def _manifest_from_dict(raw: object, where: str) -> Manifest:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise DatasetError(
            f"{where} is not a fastloader manifest (format is not {FORMAT_NAME!r}); "
            "point at a folder made by packdata."
        )
    version = raw.get("version")
    if not _is_int(version) or version not in VERSIONS:
        newer = _is_int(version) and version > FORMAT_VERSION
        raise DatasetError(
            f"{where} has format version {version!r:.40} but this fastloader reads version "
            f"{FORMAT_VERSION}; "
            + ("upgrade fastloader to read it." if newer else "the dataset is damaged: pack it "
               "again.")
        )
    _check_types(raw, where)
    if version == 2:
        from fastloader.format.fields import specs_from_manifest

        specs_from_manifest(raw.get("sample_fields"), where)
    elif "sample_fields" in raw:
        raise _damaged(where, "a version 1 manifest has sample_fields")
    try:
        shards = [ShardInfo(**shard) for shard in raw["shards"]]
        fields = {name: FieldInfo(**info) for name, info in raw["fields"].items()}
        known = {f.name for f in dataclasses.fields(Manifest)}
        rest = {k: v for k, v in raw.items() if k in known and k not in ("shards", "fields")}
        manifest = Manifest(shards=shards, fields=fields, **rest)
    except (KeyError, TypeError) as exc:
        raise DatasetError(
            f"{where} is missing or has malformed entries ({exc}); the dataset is damaged: "
            "pack it again."
        ) from None
    if manifest.backend not in BACKENDS:
        raise DatasetError(
            f"{where} names backend {manifest.backend!r:.60}; this fastloader reads {BACKENDS}."
        )
    for name in [s.file for s in manifest.shards] + [f.file for f in manifest.fields.values()]:
        check_member_name(name, where)
    return manifest


def check_member_name(name: str, where: str) -> None:
    """A file named in the manifest must be a plain relative path inside the dataset folder."""
    parts = name.split("/")
    if not name or name.startswith("/") or "\\" in name or "\0" in name or any(
        part in ("", ".", "..") for part in parts
    ):
        raise DatasetError(
            f"{where} names the file {name!r:.120}, which is not a plain relative path inside "
            "the dataset folder; the manifest is damaged or hostile: pack the dataset again."
        )


def member_path(root: Path, name: str) -> Path:
    """root/name after checking that it resolves inside root and is a regular file.

    Raises DatasetError naming the file otherwise: an escaping symlink, a FIFO or device (which
    would hang or stream forever when read), a folder, or nothing at all.
    """
    check_member_name(name, str(root / MANIFEST_NAME))
    path = root / name
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise DatasetError(
            f"{path} resolves to {real}, outside the dataset folder {root}; fastloader reads "
            "only files inside it: pack the dataset again."
        )
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        raise DatasetError(
            f"{path} cannot be read ({exc.strerror}); the dataset is incomplete: run "
            f"`packdata verify {root}` and pack it again."
        ) from None
    if not stat.S_ISREG(mode):
        raise DatasetError(
            f"{path} is not a regular file (a folder, FIFO or device); the dataset is damaged: "
            "pack it again."
        )
    return path


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read DATASET/manifest.json; DatasetNotFoundError naming the path and the fix if absent."""
    return read_manifest_bytes(path)[0]


def read_manifest_bytes(path: str | os.PathLike[str]) -> tuple[Manifest, bytes]:
    """read_manifest, with the bytes it parsed (what names a stamp, format/stamps.py)."""
    root = Path(path)
    manifest_path = root / MANIFEST_NAME
    if not root.exists():
        raise DatasetNotFoundError(
            f"{root}: no such dataset; create it with `packdata IMAGES_DIR {root}`."
        )
    if not root.is_dir():
        raise DatasetNotFoundError(
            f"{root} is a file, not a packed dataset folder; pass the folder packdata made "
            "(e.g. out.lmdb/)."
        )
    if not manifest_path.is_file():
        advice = source_advice(root)  # a source tree given for its dataset: say what it is
        if advice is not None:
            raise DatasetNotFoundError(f"{advice}.")
        raise DatasetNotFoundError(
            f"{root} has no {MANIFEST_NAME}, so it is not a complete packed dataset "
            "(an interrupted pack?); run `packdata IMAGES_DIR "
            f"{root} --overwrite` to pack it again."
        )
    try:
        raw = manifest_path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(
            f"{manifest_path} cannot be read as UTF-8 text ({exc}); the dataset is damaged: "
            "pack it again."
        ) from None
    return Manifest.from_json(text, str(manifest_path)), raw
