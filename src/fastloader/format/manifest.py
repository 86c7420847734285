"""The dataset's manifest.json: what a packed dataset holds and how to read it (format v1)."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastloader.errors import DatasetError, DatasetNotFoundError

FORMAT_NAME = "fastloader-packed"
FORMAT_VERSION = 1
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

    @property
    def stop(self) -> int:
        return self.start + self.count


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
    version: int = FORMAT_VERSION

    @property
    def total_bytes(self) -> int:
        return sum(shard.bytes for shard in self.shards)

    def to_json(self) -> str:
        """The manifest as indented JSON text (stable key order)."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

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


def _manifest_from_dict(raw: Any, where: str) -> Manifest:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise DatasetError(
            f"{where} is not a fastloader manifest (format is not {FORMAT_NAME!r}); "
            "point at a folder made by packdata."
        )
    version = raw.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise DatasetError(
            f"{where} has format version {version!r} but this fastloader reads up to "
            f"{FORMAT_VERSION}; upgrade fastloader to read it."
        )
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
            f"{where} names backend {manifest.backend!r}; this fastloader reads {BACKENDS}."
        )
    return manifest


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read DATASET/manifest.json; DatasetNotFoundError naming the path and the fix if absent."""
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
        raise DatasetNotFoundError(
            f"{root} has no {MANIFEST_NAME}, so it is not a complete packed dataset "
            "(an interrupted pack?); run `packdata IMAGES_DIR "
            f"{root} --overwrite` to pack it again."
        )
    return Manifest.from_json(manifest_path.read_text(encoding="utf-8"), str(manifest_path))
