"""The columns of a v2 dataset's fields: written as index arrays, checked and read at open.

Every column array is an index file (sha256 in manifest.json) and is range-checked like the
core index, once per version of it (format/stamps.py; every open checks shapes and dtypes):
offsets start at 0, never decrease and end at the values' size; a variable ndarray's shapes fit
its fixed dims and its offsets; a label lies in its classes. After that, a value read is a
slice of a memory-mapped array (no copy for ndarrays).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.errors import CorruptRecordError, DatasetError
from fastloader.format.fields import FieldSpec
from fastloader.format.kinds import Facts, WithMeta

Loader = Callable[[str], np.ndarray]


def _flat(values: Sequence[bytes | np.ndarray], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets (N+1,) int64) of variable-length items, concatenated."""
    offsets = np.zeros(len(values) + 1, np.int64)
    if not values:
        return np.zeros(0, dtype), offsets
    if isinstance(values[0], (bytes, bytearray, memoryview)):
        np.cumsum([len(v) for v in values], out=offsets[1:])
        return np.frombuffer(b"".join(values), np.uint8).copy(), offsets  # type: ignore[arg-type]
    flat = [np.asarray(v, dtype).reshape(-1) for v in values]
    np.cumsum([v.size for v in flat], out=offsets[1:])
    return np.concatenate(flat).astype(dtype, copy=False), offsets


def encode_column(spec: FieldSpec, values: Sequence[Any],
                  records: bool = False) -> dict[str, np.ndarray]:
    """Index arrays of one field from its per-sample stored values (pack/values.py's forms:
    int, float, ndarray of the field's dtype, or bytes; WithMeta of one for a kind with meta);
    records: the field is the records (its values are in the shards: its meta only)."""
    names = spec.arrays(records)
    out: dict[str, np.ndarray] = {}
    if isinstance(spec.kind, Facts):
        meta = np.asarray([v.meta for v in values], np.int64).reshape(len(values),
                                                                      len(spec.kind.meta))
        out[names["meta"]] = meta
        values = [v.value for v in values]
    if records:
        return out
    if not spec.variable:
        shape = (len(values), *(spec.shape or ()))
        data = np.asarray(values, spec.storage_dtype) if values else np.zeros(shape,
                                                                             spec.storage_dtype)
        return {names["data"]: data.reshape(shape), **out}
    flat, offsets = _flat(values, spec.storage_dtype)
    out |= {names["values"]: flat, names["offsets"]: offsets}
    if "shapes" in names:
        ndim = len(spec.shape or ())
        shapes = np.asarray([np.shape(v) for v in values], np.int64).reshape(len(values), ndim)
        out[names["shapes"]] = shapes
    return out


def decode_column(spec: FieldSpec, arrays: dict[str, np.ndarray]) -> list[object]:
    """encode_column's inverse: the per-sample stored values (a resumed pack's journal)."""
    values = _decode_values(spec, arrays)
    if not isinstance(spec.kind, Facts):
        return values
    meta = arrays[spec.arrays()["meta"]].tolist()
    return [WithMeta(v, tuple(m)) for v, m in zip(values, meta, strict=True)]


def _decode_values(spec: FieldSpec, arrays: dict[str, np.ndarray]) -> list[object]:
    names = spec.arrays()
    if not spec.variable:
        data = arrays[names["data"]]
        return list(data) if spec.is_array else data.tolist()
    values, offsets = arrays[names["values"]], arrays[names["offsets"]].tolist()
    if not spec.is_array:
        blob = values.tobytes()
        return [blob[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    shapes = arrays[names["shapes"]]
    return [values[offsets[i]:offsets[i + 1]].reshape(tuple(shapes[i]))
            for i in range(len(offsets) - 1)]


class Columns:
    """The field columns of an open v2 dataset: value(name, i) and gather(name, indices)."""

    def __init__(self, root: Path, specs: Sequence[FieldSpec], count: int, load: Loader,
                 records: str, trusted: bool = False) -> None:
        # trusted: a stamp vouches for these very files, whose values passed every check
        # below before it was written; only their shapes and dtypes (no row) are checked.
        self.root = root
        self.trusted = trusted
        self.specs = {s.name: s for s in specs}
        self.records = records  # the image field stored as the shards' records
        self.count = count
        self.arrays: dict[str, dict[str, np.ndarray]] = {}
        self.metas: dict[str, np.ndarray] = {}
        for spec in specs:
            arrays = {role: load(name) for role, name in spec.arrays(spec.name == records).items()}
            if isinstance(spec.kind, Facts):
                self._check_meta(spec, spec.kind, arrays.pop("meta"))
            if spec.name != records:
                self._check(spec, arrays)
                self.arrays[spec.name] = arrays

    def _damaged(self, spec: FieldSpec, what: str) -> DatasetError:
        return DatasetError(f"{self.root}: field {spec.name!r} ({spec.describe()}): {what}; the "
                            f"dataset is damaged: run `packdata verify {self.root}` and pack it "
                            "again.")

    def _check(self, spec: FieldSpec, arrays: dict[str, np.ndarray]) -> None:
        """Shapes, dtypes and every offset and label in range, before any value is read."""
        n = self.count
        if not spec.variable:
            data = arrays["data"]
            if data.shape != (n, *(spec.shape or ())) or str(data.dtype) != spec.storage_dtype:
                raise self._damaged(spec, f"stored as {data.dtype} {data.shape}, expected "
                                    f"{spec.storage_dtype} {(n, *(spec.shape or ()))}")
        else:
            values, offsets = arrays["values"], arrays["offsets"]
            if (values.ndim != 1 or str(values.dtype) != spec.storage_dtype
                    or offsets.shape != (n + 1,) or offsets.dtype != np.int64):
                raise self._damaged(spec, "its values or offsets have the wrong shape or dtype")
            if offsets[0] != 0 or offsets[-1] != values.size or (
                    not self.trusted and np.any(np.diff(offsets) < 0)):
                raise self._damaged(spec, "its offsets do not slice its values in order")
            if "shapes" in arrays:
                self._check_shapes(spec, arrays["shapes"], offsets)
        # what only the kind knows (labels): every row, so only for an unstamped version
        problem = None if self.trusted else spec.kind.check_column(spec, arrays)
        if problem is not None:
            raise self._damaged(spec, problem)

    def _check_meta(self, spec: FieldSpec, kind: Facts, meta: np.ndarray) -> None:
        want = (self.count, len(kind.meta))
        if meta.shape != want or meta.dtype != np.int64:
            raise self._damaged(spec, f"its meta column is {meta.dtype} {meta.shape}, "
                                f"expected int64 {want}")
        # the kind's own ranges: every row, so only for an unstamped version
        problem = None if self.trusted else spec.kind.check_column(spec, {"meta": meta})
        if problem is not None:
            raise self._damaged(spec, problem)
        self.metas[spec.name] = meta

    def meta(self, name: str) -> np.ndarray:
        """Field name's (N, len(kind.meta)) int64 facts (audio: sample_rate, channels,
        frames per clip), checked at open; KeyError if its kind keeps none."""
        return self.metas[name]

    def _check_shapes(self, spec: FieldSpec, shapes: np.ndarray, offsets: np.ndarray) -> None:
        want = np.asarray(spec.shape or (), np.int64)
        if shapes.shape != (self.count, want.size) or shapes.dtype != np.int64:
            raise self._damaged(spec, f"its shapes array is {shapes.dtype} {shapes.shape}")
        if self.trusted:
            return
        fixed = want >= 0
        if np.any(shapes < 0) or np.any(shapes[:, fixed] != want[fixed]) or np.any(
            np.prod(shapes, axis=1) != np.diff(offsets)
        ):
            raise self._damaged(spec, "a per-sample shape disagrees with its fixed dims or size")

    def value(self, name: str, i: int, where: str) -> object:
        """Sample i's value of field name (not the records' image)."""
        spec, arrays = self.specs[name], self.arrays[name]
        if not spec.variable:
            data = np.asarray(arrays["data"][i])
            return data if spec.is_array else data[()]
        shape = arrays["shapes"][i] if spec.is_array else None
        return spec.kind.load(spec, self.blob(name, i), shape, lambda why: CorruptRecordError(
            f"{where}: {why}; run `packdata verify {self.root}` and pack it again."))

    def blob(self, name: str, i: int) -> np.ndarray:
        """Sample i's stored values of a variable field, a view of the column (uint8 bytes,
        or an array field's dtype)."""
        arrays = self.arrays[name]
        return arrays["values"][int(arrays["offsets"][i]):int(arrays["offsets"][i + 1])]

    def mask_error(self, name: str, where: str, exc: Exception) -> CorruptRecordError:
        """The error of a damaged mask of field name at `where`, saying how to mend it."""
        return CorruptRecordError(f"{where}: mask field {name!r}: {exc}; run `packdata verify "
                                  f"{self.root}` and pack it again.")

    def gather(self, name: str, indices: np.ndarray
               ) -> np.ndarray | list[np.ndarray] | list[object]:
        """The values of indices: an array [B, ...] for fixed fields, else a list."""
        spec, arrays = self.specs[name], self.arrays[name]
        if not spec.variable:
            return np.asarray(arrays["data"][indices])
        if spec.is_array:
            return self.gather_arrays(name, indices)
        return [self.value(name, int(i), f"sample {int(i)}") for i in indices]

    def gather_arrays(self, name: str, indices: np.ndarray) -> list[np.ndarray]:
        """The values of indices of a variable array field (boxes, ndarrays), one array each:
        the batch's slices and shapes read at once."""
        arrays = self.arrays[name]
        rows = np.asarray(indices, np.int64)
        offsets, values = arrays["offsets"], np.asarray(arrays["values"])  # not np.memmap
        starts, stops = offsets[rows].tolist(), offsets[rows + 1].tolist()
        shapes = arrays["shapes"][rows].tolist()
        return [values[start:stop].reshape(shape)
                for start, stop, shape in zip(starts, stops, shapes, strict=True)]
