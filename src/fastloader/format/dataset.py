"""PackedDataset: random access to a local packed dataset's records and labels (format/open.py
opens one from a path or URL)."""

from __future__ import annotations

import contextlib
import functools
import mmap
import operator
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, SupportsIndex

import numpy as np

from fastloader.decode.orientation import turned_shapes
from fastloader.decode.tiles import HEADER_FIELDS, TileBatch, TileTable
from fastloader.errors import CorruptRecordError, DatasetError
from fastloader.format import index as index_mod
from fastloader.format import integrity, stamps
from fastloader.format.backends import ShardReader, open_reader
from fastloader.format.columns import Columns
from fastloader.format.fields import FieldSpec, primary_image, specs_from_manifest
from fastloader.format.manifest import Manifest, read_manifest_bytes


class PackedDataset:
    """A packed dataset: ds[i] -> (record bytes view, label), plus its index arrays.

    Record views are zero-copy (into the LMDB map or the HDF5 shard's mmap) and stay valid until
    close(). Reads are safe from many threads at once and in forked children. A context manager.

    Args:
        path: the packed dataset folder (NAME.lmdb or NAME.h5).

    Raises:
        DatasetNotFoundError: there is no packed dataset at path.
        DatasetError: its manifest or index is unreadable or inconsistent.
    """

    def __init__(self, path: str | os.PathLike[str], check_sha256: bool = True) -> None:
        # check_sha256=False: verify's own open (it reports edited index files itself); the
        # range checks that keep reads inside the shards run either way.
        self._check_sha256 = check_sha256
        self.root = Path(path).expanduser().absolute()
        self.manifest: Manifest
        self.manifest, manifest_bytes = read_manifest_bytes(self.root)
        self.backend: str = self.manifest.backend
        self.classes: list[str] = list(self.manifest.classes)
        integrity.shard_paths(self.root, self.manifest)  # whole, regular, inside: before mmap
        self._load_index(manifest_bytes)
        # Every shard is opened now, not on first use: a missing or damaged one fails here with
        # its name, and a reader keeps the version it opened to the end even if `packdata
        # --overwrite` replaces the folder meanwhile (open files outlive their unlinking).
        self._reader: ShardReader | None = open_reader(
            self.backend, self.root, self.manifest.shards
        )
        self._paths: list[str] | None = None
        # Whether record() checks each record's crc32 (FastLoader(verify_records=True) sets
        # it): a flipped byte in a shard then fails as CorruptRecordError, which
        # on_error="skip" skips, instead of reaching the decoder.
        self.verify_records = False

    def _load_index(self, manifest_bytes: bytes | None) -> None:
        """Map the index (only .npy headers are read); hash it and check every value's range
        only when no stamp vouches for exactly these files (format/stamps.py), so an open
        after the first of a version reads no row. A stamp is written once all checks pass."""
        count = self.manifest.num_samples
        integrity.check_dtypes(self.root, self.manifest)
        mapped = {name: index_mod.map_field(self.root, self.manifest, name)
                  for name in self._index_names()}
        files = {name: m.stat for name, m in mapped.items()}
        stamp = None
        if self._check_sha256 and manifest_bytes is not None:
            stamp = stamps.Stamp(self.root, manifest_bytes)
        trusted = stamp is not None and stamp.matches(files)
        with contextlib.nullcontext() if trusted or stamp is None else stamp.exclusive():
            trusted = trusted or (stamp is not None and stamp.matches(files))  # waited on one
            if not trusted and self._check_sha256:
                for name, m in mapped.items():
                    m.check_sha256(self.root, self.manifest.fields[name].sha256)
            self._assign_index({name: m.array for name, m in mapped.items()}, count, trusted)
            self._distinct: np.ndarray | None = stamp.shapes() if trusted and stamp else None
            if stamp is not None and not trusted:
                stamp.write(files, self.distinct_shapes)
        for m in mapped.values():
            if not trusted:  # the check read every page: let this mapping forget them
                m.forget_pages()
            # Reads from now on are a batch's scattered rows: no read-ahead around each (on
            # a cold page cache that would read ~128 KB of disk for each 8-byte value).
            m.advise(mmap.MADV_RANDOM)
        self.index_trusted = trusted  # whether a stamp spared this open its checks

    def _index_names(self) -> list[str]:
        """The index arrays this reader maps: the core, the tiles', the EXIF orientations',
        the v2 columns' (the records field's meta column too: an audio dataset's rates,
        channels and frames)."""
        names = list(index_mod.CORE_FIELDS)
        if self.tiled:
            names += ["tiles_header", "tiles_offsets", "tiles_start"]
        if index_mod.ORIENTATION in self.manifest.fields:  # pack --apply-exif-orientation
            names.append(index_mod.ORIENTATION)
        if self.manifest.version >= 2:
            specs = specs_from_manifest(self.manifest.sample_fields, str(self.root))
            records = primary_image(specs).name  # its values are the shards' (a meta column)
            names += [n for s in specs for n in s.arrays(s.name == records).values()]
        return names

    def _assign_index(self, arrays: dict[str, np.ndarray], count: int, trusted: bool) -> None:
        self._arrays = arrays
        self._shard, self._offset = arrays["shard"], arrays["offset"]
        self._length = arrays["length"]
        self.labels: np.ndarray = arrays["label"]
        self.shapes: np.ndarray = arrays["shape"]
        self.codecs: np.ndarray = arrays["codec"]
        self.crc32s: np.ndarray = arrays["crc32"]
        self._path_offsets, self._path_bytes = arrays["path_offsets"], arrays["path_bytes"]
        per_sample = [self._shard, self._offset, self._length, self.labels, self.shapes]
        per_sample += [self.codecs, self.crc32s]
        if any(len(a) != count for a in per_sample) or len(self._path_offsets) != count + 1:
            raise DatasetError(
                f"{self.root}: index arrays do not all have {count} entries as manifest.json "
                "says; the dataset is damaged: pack it again."
            )
        if not trusted:  # every row read: once per version of the index
            integrity.check_index(self.root, self.manifest, arrays)
        self._load_orientations(count)
        self._tiles: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if self.tiled:
            self._load_tiles(count)
        self._load_fields(count, trusted)

    @property
    def distinct_shapes(self) -> np.ndarray:
        """The distinct (height, width) of the records, (K, 2) int64 sorted: what a loader's
        output size depends on (recorded with the stamp, so a trusted open scans no row)."""
        if self._distinct is None:
            keys = np.zeros(0, np.int64)
            for start in range(0, len(self), integrity.CHUNK):  # memory bounded at any n
                rows = np.asarray(self.shapes[start:start + integrity.CHUNK], np.int64)
                keys = np.union1d(keys, (rows[:, 0] << 32) | (rows[:, 1] & 0xFFFFFFFF))
            self._distinct = np.stack([keys >> 32, keys & 0xFFFFFFFF], axis=1)
        return self._distinct

    def _load_fields(self, count: int, trusted: bool) -> None:
        # v1: the fields image + label. v2: the declared ones; every column but the records'
        # image is index arrays, memory-mapped (an embedding column can be large), checked now
        # (its values only when no stamp vouches for them: they are in _index_names).
        if self.manifest.version == 1:
            classes = tuple(self.classes)
            self.fields: dict[str, FieldSpec] = {
                "image": FieldSpec("image", "image"),
                "label": FieldSpec("label", "int", classes=classes),
            }
            self.image_field = "image"
            self.columns: Columns | None = None
            return
        specs = specs_from_manifest(self.manifest.sample_fields, str(self.root))
        self.fields = {s.name: s for s in specs}
        self.image_field = primary_image(specs).name
        self.columns = Columns(self.root, specs, count, self._arrays.__getitem__,
                               self.image_field, trusted)

    def _load_orientations(self, count: int) -> None:
        # Packed with --apply-exif-orientation: each image's EXIF orientation (index field
        # "orientation", uint8, mapped and stamped like the core; its 1..8 range is
        # integrity.check_index's) and `shapes` are the turned sizes; otherwise (every older
        # dataset too) orientations is None and the images are as stored.
        self.orientations: np.ndarray | None = None
        values = self._arrays.get(index_mod.ORIENTATION)
        if values is None:
            return
        if values.shape != (count,) or values.dtype != np.uint8:
            raise DatasetError(
                f"{self.root}: the index field {index_mod.ORIENTATION!r} does not hold {count} "
                "EXIF orientations (uint8, 1..8); the dataset is damaged: pack it again.")
        self.orientations = values

    @functools.cached_property
    def stored_shapes(self) -> np.ndarray:
        """(N, 2) (height, width) of each record as stored: `shapes` turned back by the EXIF
        orientations (an oriented pack's), or `shapes` itself; worked out on first use, as
        only a loader that does not apply the orientations and verify need it."""
        if self.orientations is None:
            return self.shapes
        return turned_shapes(self.shapes, self.orientations)

    def _load_tiles(self, count: int) -> None:
        # Memory-mapped: tiles_offsets holds every segment offset of the dataset, and the page
        # cache shares all three between loader processes.
        headers, offsets, starts = (
            self._arrays[name] for name in ("tiles_header", "tiles_offsets", "tiles_start"))
        fits = (headers.shape == (count, len(HEADER_FIELDS)) and headers.dtype == np.int64
                and starts.shape == (count + 1,) and starts.dtype == np.uint64
                and offsets.ndim == 1 and offsets.dtype == np.uint32)
        if not fits or (count and int(starts[-1]) != offsets.size):
            raise DatasetError(
                f"{self.root}: the tile index (tiles_header, tiles_offsets, tiles_start) does "
                f"not fit {count} records; the dataset is damaged: pack it again with --tiles."
            )
        self._tiles = (headers, offsets, starts)

    # -- size and indexing -------------------------------------------------------------

    def __len__(self) -> int:
        return self.manifest.num_samples

    def _check_index(self, i: SupportsIndex) -> int:
        try:
            index = operator.index(i)
        except TypeError:
            raise TypeError(
                f"dataset index must be an integer, got {type(i).__name__} ({i!r:.40})"
            ) from None
        if not 0 <= index < self.manifest.num_samples:
            raise IndexError(
                f"index {index} is out of range for {self.root} with "
                f"{self.manifest.num_samples} records (valid: 0..{self.manifest.num_samples - 1})"
            )
        return index

    def __getitem__(self, i: int) -> tuple[memoryview, int]:
        index = self._check_index(i)
        return self.record(index), int(self.labels[index])

    def record(self, i: int, verify: bool | None = None) -> memoryview:
        """Record i's encoded bytes.

        Args:
            i: the sample index, 0 <= i < len(ds).
            verify: also check the record's crc32 (None: as self.verify_records says).

        Returns:
            memoryview: a zero-copy view, valid until close().

        Raises:
            DatasetError: the dataset is closed.
            CorruptRecordError: the record is missing, has the wrong length, or fails its crc32.
            IndexError: i is out of range.
            TypeError: i is not an integer.
        """
        index = self._check_index(i)
        length = int(self._length[index])
        if self._reader is None:
            raise DatasetError(f"{self.root} is closed; open it again with open_dataset().")
        try:
            data = self._reader.read(int(self._shard[index]), int(self._offset[index]), length)
        except CorruptRecordError as exc:  # the backend found the shard damaged
            raise CorruptRecordError(
                f"{self.describe(index)} cannot be read ({exc}); run `packdata verify "
                f"{self.root}` and pack the dataset again."
            ) from None
        if data is None or len(data) != length:
            got = "missing" if data is None else f"{len(data)} bytes"
            raise CorruptRecordError(
                f"{self.describe(index)} is {got}, the index says {length} bytes; "
                f"run `packdata verify {self.root}` and pack the dataset again."
            )
        check = self.verify_records if verify is None else verify
        if check and zlib.crc32(data) != int(self.crc32s[index]):
            raise CorruptRecordError(
                f"{self.describe(index)} fails its crc32 check; run `packdata verify "
                f"{self.root}` and pack the dataset again."
            )
        return data

    def value(self, name: str, i: int) -> Any:
        """Sample i's raw value of field name (see sample())."""
        index = self._check_index(i)
        if name not in self.fields:
            raise KeyError(f"{self.root} has no field {name!r}; its fields are "
                           f"{list(self.fields)}")
        if name == self.image_field:
            return bytes(self.record(index))
        if self.columns is None:  # v1: the label
            return self.labels[index]
        return self.columns.value(name, index, self.describe(index))

    def sample(self, i: int) -> dict[str, Any]:
        """Sample i as a dict of its raw field values.

        Args:
            i: the sample index, 0 <= i < len(ds).

        Returns:
            dict: field name -> value: images as bytes, int/float as numpy scalars, ndarrays as
            numpy arrays (views of the memory-mapped column), masks as uint8 numpy [H, W]
            arrays (decoded, writable), text as str, bytes as bytes,
            json as the parsed Python value.

        Raises:
            CorruptRecordError: a record or value is damaged.
            IndexError: i is out of range.
        """
        return {name: self.value(name, i) for name in self.fields}

    # -- metadata ------------------------------------------------------------------------

    @property
    def paths(self) -> list[str]:
        """Every record's source path relative to the packed folder (POSIX, sample order)."""
        if self._paths is None:
            self._paths = index_mod.decode_paths(self._path_offsets, self._path_bytes)
        return self._paths

    def path(self, i: int) -> str:
        """Record i's source path relative to the packed folder."""
        return index_mod.decode_path(self._path_offsets, self._path_bytes, self._check_index(i))

    @property
    def lengths(self) -> np.ndarray:
        """Record sizes in bytes, (N,) int64."""
        return self._length

    @property
    def shard_ids(self) -> np.ndarray:
        """Which shard holds each record, (N,) int32."""
        return self._shard

    @property
    def offsets(self) -> np.ndarray:
        """Per record: LMDB key number, or byte offset inside the HDF5 shard's records."""
        return self._offset

    def field(self, name: str) -> np.ndarray:
        """Any index field by name, including ones added by later format features."""
        return index_mod.load_field(self.root, self.manifest, name, mmap=True)

    # -- decode-aware tiles ----------------------------------------------------------------

    @property
    def tiled(self) -> bool:
        """Whether the records were packed as restart-tiled JPEGs (packdata --tiles)."""
        return "tiles" in self.manifest.options

    def tile_batch(self, indices: np.ndarray | Sequence[int]) -> TileBatch | None:
        """The tile tables of records `indices` for BatchDecoder.decode_into(tiles=); None if
        the dataset is not tiled. Pure array indexing: no per-sample Python work."""
        if self._tiles is None:
            return None
        return TileBatch.gather(*self._tiles, indices)

    def tile_table(self, i: int) -> TileTable | None:
        """Record i's tile table (None: untiled dataset or record); CorruptRecordError if bad."""
        index = self._check_index(i)
        if self._tiles is None or not self._tiles[0][index].any():
            return None
        headers, offsets, starts = self._tiles
        begin, end = int(starts[index]), int(starts[index + 1])
        try:
            return TileTable.from_arrays(np.asarray(headers[index]), offsets[begin:end])
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{self.describe(index)}: {exc}") from None

    def shard_file(self, i: int) -> str:
        """File name of the shard holding record i."""
        return self.manifest.shards[int(self._shard[self._check_index(i)])].file

    def describe(self, i: int) -> str:
        """Where record i lives, for error messages: index, shard, source path and dataset."""
        index = int(i)
        if not 0 <= index < len(self):
            return f"record {index} (out of range) of {self.root}"
        return (
            f"record {index} (shard {self.shard_file(index)!r}, source {self.path(index)!r}) "
            f"of {self.root}"
        )

    def __repr__(self) -> str:
        return (
            f"PackedDataset({str(self.root)!r}, backend={self.backend!r}, "
            f"records={len(self)}, classes={len(self.classes)})"
        )

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Release shard handles; record views returned earlier must not be used afterwards."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> PackedDataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, object]:
        # Spawned workers reopen from the path: handles never cross a process boundary.
        return {"root": str(self.root), "verify_records": self.verify_records}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"])  # type: ignore[misc]
        self.verify_records = bool(state.get("verify_records", False))

