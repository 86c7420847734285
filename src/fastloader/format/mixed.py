"""MixedDataset: several packed datasets read as one, by (source, index), for a weighted mix.

Sample ids run through the sources in order (source s holds ids starts[s] ..
starts[s + 1] - 1). The per-sample arrays the decode pipeline gathers (labels, shapes) are
concatenated once, so a batch mixing sources takes the same fused native decode as one
source; records, field values and tile tables are read from each sample's own source.
Classes are joined by name (first seen first) and every label is remapped into that list.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, SupportsIndex, cast

import numpy as np

from fastloader.decode.tiles import HEADER_FIELDS, TileBatch, TileTable
from fastloader.errors import InvalidArgumentError
from fastloader.format.dataset import PackedDataset
from fastloader.format.fields import FieldSpec


def join_classes(class_lists: Sequence[Sequence[str]]) -> tuple[list[str], list[np.ndarray]]:
    """The classes of every source joined by name (in order of first appearance), and each
    source's remap table (its label k is joined label table[k])."""
    joined: dict[str, int] = {}
    tables = []
    for classes in class_lists:
        tables.append(np.asarray([joined.setdefault(c, len(joined)) for c in classes],
                                 dtype=np.int64))
    return list(joined), tables


def _shape_of(spec: FieldSpec) -> tuple[object, ...]:
    """What two sources' field must share to mix (its classes may differ: they are joined)."""
    return (str(spec.kind), spec.dtype, spec.shape, spec.per_box)


def check_fields(names: Sequence[str], sources: Sequence[PackedDataset]) -> None:
    """Refuse sources whose fields differ, naming the field and the two sources."""
    first = sources[0]
    for name, source in zip(names[1:], sources[1:], strict=True):
        if source.image_field != first.image_field or set(source.fields) != set(first.fields):
            raise InvalidArgumentError(
                f"mix source {name!r} has the fields {sorted(source.fields)} (image "
                f"{source.image_field!r}), source {names[0]!r} has {sorted(first.fields)} (image "
                f"{first.image_field!r}): sources mix only with the same fields. Pack them with "
                "the same fields, or mix sources that share them.")
        for field, spec in first.fields.items():
            if _shape_of(source.fields[field]) != _shape_of(spec):
                raise InvalidArgumentError(
                    f"mix source {name!r}'s field {field!r} is {_shape_of(source.fields[field])}"
                    f" (kind, dtype, shape, per_box), source {names[0]!r}'s is "
                    f"{_shape_of(spec)}: sources mix only with the same fields.")


def shared_fields(names: Sequence[str], sources: Sequence[PackedDataset]) -> list[str]:
    """The fields every source has alike (the first source's order), or an error when the
    records' image field is not among them."""
    first = sources[0]
    common = [f for f, spec in first.fields.items() if all(
        f in s.fields and _shape_of(s.fields[f]) == _shape_of(spec) for s in sources[1:])]
    for name, source in zip(names, sources, strict=True):
        if source.image_field != first.image_field or first.image_field not in common:
            raise InvalidArgumentError(
                f"mix source {name!r} stores {source.image_field!r} as its images, source "
                f"{names[0]!r} stores {first.image_field!r}: even on their shared fields, "
                "sources mix only with the same image field.")
    return common


class MixedColumns:
    """The field columns of a mix: each sample's value read from its source's columns."""

    def __init__(self, mix: MixedDataset) -> None:
        self.mix = mix
        self.root = mix.root

    def _split(self, indices: np.ndarray | Sequence[int]
               ) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(source, positions in the batch, its local indices) for each source in a batch."""
        ids = np.asarray(indices, dtype=np.int64)
        which = self.mix.source_of(ids)
        local = ids - self.mix.starts[which]
        return [(int(s), np.flatnonzero(which == s), local[which == s])
                for s in np.unique(which)]

    def _columns(self, s: int) -> Any:
        return self.mix.sources[s].columns

    def _gather(self, s: int, name: str, local: np.ndarray) -> Any:
        columns = self._columns(s)
        if columns is None:  # a v1 source mixed on shared fields: its one field, the label
            return np.asarray(self.mix.sources[s].labels[local])
        return columns.gather(name, local)

    def gather(self, name: str, indices: np.ndarray | Sequence[int]
               ) -> np.ndarray | list[object]:
        """The batch's values of field name: an array for fixed fields, else a list; labels
        of a field with classes remapped into the joined classes."""
        parts = [(pos, self._gather(s, name, local), s)
                 for s, pos, local in self._split(indices)]
        remap = self.mix.class_fields.get(name)
        if parts and isinstance(parts[0][1], np.ndarray):
            out = np.empty((len(indices), *parts[0][1].shape[1:]), dtype=parts[0][1].dtype)
            for pos, values, s in parts:
                out[pos] = values if remap is None else remap[s][values]
            return out
        items: list[object] = [None] * len(indices)
        for pos, values, s in parts:
            for k, value in zip(pos.tolist(), values, strict=True):
                items[k] = value if remap is None else remap[s][np.asarray(value)]
        return items

    def gather_arrays(self, name: str, indices: np.ndarray) -> list[np.ndarray]:
        """The batch's values of a variable array field (boxes, ndarrays), one array each,
        read from each sample's source; a field with classes remapped into the joined ones:
        gather's list (each source's Columns.gather gives such a field's arrays)."""
        return cast("list[np.ndarray]", self.gather(name, indices))

    def value(self, name: str, i: int, where: str) -> object:
        s, local = self.mix.locate(i)
        value = self._columns(s).value(name, local, where)
        remap = self.mix.class_fields.get(name)
        return value if remap is None else remap[s][value]

    def blob(self, name: str, i: int) -> np.ndarray:
        s, local = self.mix.locate(i)
        return self._columns(s).blob(name, local)

    def mask_error(self, name: str, where: str, exc: Exception) -> Exception:
        return self._columns(0).mask_error(name, where, exc)


class MixedDataset(PackedDataset):
    """Several open packed datasets as one, sample ids source after source.

    A PackedDataset to the loader (records, labels, shapes, fields, tiles, describe), built
    from open datasets; close() closes those `owned` marks (default: all). `names` name the
    sources in errors and in `source_names`; `source_of(ids)` tells each sample's source.
    """

    def __init__(self, sources: Sequence[PackedDataset], names: Sequence[str],
                 owned: Sequence[bool] | None = None, shared: bool = False) -> None:
        if not sources:
            raise InvalidArgumentError("a mix needs at least one source")
        if shared:  # mixed on the fields they share
            common = shared_fields(names, sources)
        else:
            check_fields(names, sources)
            common = list(sources[0].fields)
        self.sources = list(sources)
        self.owned = [True] * len(sources) if owned is None else list(owned)
        self.source_names = [str(n) for n in names]
        self.root = Path("mix(" + ", ".join(self.source_names) + ")")
        counts = np.asarray([len(s) for s in sources], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.classes, tables = join_classes([s.classes for s in sources])
        self.labels = np.concatenate([t[s.labels] if len(t) else s.labels
                                      for s, t in zip(sources, tables, strict=True)])
        self.shapes = np.concatenate([s.shapes for s in sources])
        # the sources' distinct shapes (each from its stamp), united: no scan of every row
        self._distinct: np.ndarray | None = np.unique(
            np.concatenate([s.distinct_shapes for s in sources]), axis=0)
        self.index_trusted = all(s.index_trusted for s in sources)
        self.codecs = np.concatenate([s.codecs for s in sources])
        self.crc32s = np.concatenate([s.crc32s for s in sources])
        self._length = np.concatenate([s.lengths for s in sources])
        self.orientations = None if all(s.orientations is None for s in sources) else \
            np.concatenate([np.ones(len(s), np.uint8) if s.orientations is None
                            else s.orientations for s in sources])
        # stored_shapes: PackedDataset's, on first use (shapes turned back by these, which
        # leave an unoriented source's rows as they are): no copy when none is oriented
        self._init_fields(common)
        self.verify_records = False

    def _init_fields(self, common: list[str]) -> None:
        """The first source's fields (of `common`), those with classes holding the joined
        ones."""
        first = self.sources[0]
        self.image_field = first.image_field
        self.class_fields: dict[str, list[np.ndarray]] = {}
        self.fields = {}
        for name in common:
            spec = first.fields[name]
            if spec.classes is not None:
                joined, remaps = join_classes([s.fields[name].classes or ()
                                               for s in self.sources])
                spec = FieldSpec(name, str(spec.kind), spec.dtype, spec.shape,
                                 tuple(joined), spec.per_box)
                if any(not np.array_equal(r, np.arange(len(r))) for r in remaps):
                    self.class_fields[name] = remaps
            self.fields[name] = spec
        self.columns = None if all(s.columns is None for s in self.sources) else \
            MixedColumns(self)  # type: ignore[assignment]
        self.manifest = None  # type: ignore[assignment]  # no one manifest: see identity()

    # -- where a sample lives -----------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.starts[-1])

    def source_of(self, ids: np.ndarray) -> np.ndarray:
        """Each sample id's source number (int64, like ids)."""
        return np.searchsorted(self.starts, ids, side="right").astype(np.int64) - 1

    def locate(self, i: int) -> tuple[int, int]:
        """(source, index in that source) of sample id i."""
        index = self._check_index(i)
        s = int(np.searchsorted(self.starts, index, side="right")) - 1
        return s, index - int(self.starts[s])

    def _check_index(self, i: SupportsIndex) -> int:
        index = int(i)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} is out of range for {self.root} with {len(self)} "
                             f"records (valid: 0..{len(self) - 1})")
        return index

    # -- reads ---------------------------------------------------------------------------------

    def record(self, i: int, verify: bool | None = None) -> memoryview:
        s, local = self.locate(i)
        check = self.verify_records if verify is None else verify
        return self.sources[s].record(local, verify=check)

    def __getitem__(self, i: int) -> tuple[memoryview, int]:
        return self.record(i), int(self.labels[self._check_index(i)])

    def value(self, name: str, i: int) -> Any:
        s, local = self.locate(i)
        if name not in self.fields:
            raise KeyError(f"{self.root} has no field {name!r}; its fields are "
                           f"{list(self.fields)}")
        if self.sources[s].columns is None and name != self.image_field:  # v1: the label
            return self.labels[self._check_index(i)]
        value = self.sources[s].value(name, local)
        remap = self.class_fields.get(name)
        return value if remap is None else remap[s][value]

    def tile_batch(self, indices: np.ndarray | Sequence[int]) -> TileBatch | None:
        """The batch's tile tables, each source's rows gathered at once (its tile_batch), as
        TileBatch.from_tables builds them: offsets of the tiled records copied into one array
        in batch order (an untiled record: zeros, span (0, 0)). None when no source is tiled."""
        if not any(s.tiled for s in self.sources):
            return None
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        outside = (ids < 0) | (ids >= len(self))
        if outside.any():
            self._check_index(int(ids[np.argmax(outside)]))  # the IndexError naming it
        which = self.source_of(ids)
        headers = np.zeros((ids.size, len(HEADER_FIELDS)), np.int64)
        begins, sizes = np.zeros(ids.size, np.int64), np.zeros(ids.size, np.int64)
        parts: list[tuple[np.ndarray, np.ndarray]] = []  # (batch positions, source offsets)
        for s in np.unique(which).tolist():
            pos = np.flatnonzero(which == s)
            tiles = self.sources[s].tile_batch(ids[pos] - self.starts[s])
            if tiles is None:
                continue
            headers[pos] = tiles.headers
            spans = tiles.spans.astype(np.int64)
            begins[pos] = spans[:, 0]
            sizes[pos] = np.where(tiles.headers.any(axis=1), spans[:, 1] - spans[:, 0], 0)
            parts.append((pos, tiles.offsets))
        ends = np.cumsum(sizes)
        at = ends - sizes
        offsets = np.empty(int(ends[-1]) if ids.size else 0, np.uint32)
        for pos, source_offsets in parts:
            counts = sizes[pos]
            within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            offsets[np.repeat(at[pos], counts) + within] = \
                source_offsets[np.repeat(begins[pos], counts) + within]
        spans = np.stack([at, ends], axis=1).astype(np.uint64)
        spans[sizes == 0] = 0
        return TileBatch(headers, offsets, spans)

    def tile_table(self, i: int) -> TileTable | None:
        s, local = self.locate(i)
        return self.sources[s].tile_table(local)

    @property
    def tiled(self) -> bool:
        return any(s.tiled for s in self.sources)

    def path(self, i: int) -> str:
        s, local = self.locate(i)
        return self.sources[s].path(local)

    @property
    def paths(self) -> list[str]:
        return [p for s in self.sources for p in s.paths]

    def describe(self, i: int) -> str:
        index = int(i)
        if not 0 <= index < len(self):
            return f"record {index} (out of range) of {self.root}"
        s, local = self.locate(index)
        return f"{self.sources[s].describe(local)} (mix source {self.source_names[s]!r})"

    def plan_epoch(self, indices: np.ndarray) -> None:
        """Tell each remote source the records of it this pass reads, in order."""
        ids = np.asarray(indices, dtype=np.int64)
        which = self.source_of(ids)
        for s, source in enumerate(self.sources):
            plan = getattr(source, "plan_epoch", None)
            if plan is not None:
                plan(ids[which == s] - self.starts[s])

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        for source, owned in zip(self.sources, self.owned, strict=True):
            if owned:  # a PackedDataset the caller passed stays the caller's to close
                source.close()

    def __getstate__(self) -> dict[str, object]:
        return {"sources": self.sources, "names": self.source_names,
                "shared": list(self.fields) != list(self.sources[0].fields),
                "verify_records": self.verify_records}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["sources"], state["names"],  # type: ignore[misc]
                      shared=bool(state.get("shared")))
        self.verify_records = bool(state.get("verify_records", False))

    def __repr__(self) -> str:
        return f"MixedDataset({self.source_names}, records={len(self)})"
