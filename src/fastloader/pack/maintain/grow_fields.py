"""The index columns append and merge carry beyond the core ones: tile tables (--tiles), EXIF
orientations and format v2 declared fields.

Each input's rows are concatenated in input order; a flat values column (a variable field's
values, the tile segment offsets) is concatenated whole and its offsets column (n + 1 prefix
sums) shifted by the values before it. A field with classes has its classes joined by name
like the labels (the first input's ids kept) and its values remapped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from fastloader.errors import PackError
from fastloader.format import index as index_mod
from fastloader.format.dataset import PackedDataset

_TILES = {"tiles_start": "tiles_offsets"}  # offsets column -> the flat column it indexes
log = logging.getLogger("fastloader")

ClassJoin = Callable[[Sequence[Sequence[str]]], tuple[list[str], list[np.ndarray]]]


def _field_shape(entry: Mapping[str, object]) -> dict[str, object]:
    """A declared field's manifest entry without its classes (which may differ: joined)."""
    return {k: v for k, v in entry.items() if k != "classes"}


def check_extra(datasets: Sequence[PackedDataset]) -> None:
    """Refuse inputs whose declared fields or tiling differ, naming both datasets."""
    first = datasets[0]
    for ds in datasets[1:]:
        mine, theirs = first.manifest, ds.manifest
        if mine.version != theirs.version or [_field_shape(f) for f in mine.sample_fields] != \
                [_field_shape(f) for f in theirs.sample_fields]:
            raise PackError(f"{ds.root} declares the fields {theirs.sample_fields} but "
                            f"{first.root} declares {mine.sample_fields}; datasets with the "
                            "same fields only (their classes may differ: they are joined).")
        if mine.options.get("tiles") != theirs.options.get("tiles"):
            raise PackError(f"{ds.root} is packed with tiles={theirs.options.get('tiles')} but "
                            f"{first.root} with tiles={mine.options.get('tiles')}; pack them "
                            "the same way (packdata --tiles, or without).")


def warn_joined(datasets: Sequence[PackedDataset]) -> None:
    """One line on the "fastloader" logger when inputs share class names (joined as one)."""
    seen: dict[str, int] = {}
    for ds in datasets:
        for name in set(ds.classes):
            seen[name] = seen.get(name, 0) + 1
    shared = sorted(n for n, count in seen.items() if count > 1)
    if shared:
        log.warning("classes of the same name are joined into one class: %d shared (%s%s)",
                    len(shared), ", ".join(shared[:5]), ", ..." if len(shared) > 5 else "")


class ExtraColumns:
    """The non-core index columns of the output, built input span by input span."""

    def __init__(self, datasets: Sequence[PackedDataset], join: ClassJoin) -> None:
        first = datasets[0]
        self.names = sorted(set(first.manifest.fields) - set(index_mod.CORE_FIELDS))
        self.pairs = dict(_TILES) if "tiles_start" in self.names else {}
        self.remap: dict[str, str] = {}  # index column -> the field whose classes it holds
        self.sample_fields = [dict(f) for f in first.manifest.sample_fields]
        self.maps: dict[str, list[np.ndarray]] = {}
        if first.columns is not None:
            for spec in first.fields.values():
                roles = spec.arrays()
                if "offsets" in roles:
                    self.pairs[roles["offsets"]] = roles["values"]
                if spec.classes is not None and spec.name != first.image_field:
                    self.remap[roles.get("data", roles.get("values", ""))] = spec.name
                    joined, self.maps[spec.name] = join(
                        [ds.fields[spec.name].classes or () for ds in datasets])
                    for entry in self.sample_fields:
                        if entry["name"] == spec.name:
                            entry["classes"] = joined
        self.parts: dict[str, list[np.ndarray]] = {n: [] for n in self.names}
        self.ends = dict.fromkeys(self.pairs, 0)  # values already taken, per offsets column
        # The current input's columns, loaded once: ds.field maps and sha256-checks a whole
        # column, and add() is called once per input shard.
        self._loaded: tuple[int, dict[str, np.ndarray]] = (-1, {})

    def _column(self, ds: PackedDataset, name: str, which: int) -> np.ndarray:
        if self._loaded[0] != which:
            self._loaded = (which, {})
        cache = self._loaded[1]
        if name not in cache:
            cache[name] = np.asarray(ds.field(name))
        return cache[name]

    def add(self, ds: PackedDataset, span: slice, which: int) -> None:
        """Input `which`'s rows span.start..span.stop-1."""
        flat = set(self.pairs.values())
        for name in self.names:
            if name in flat:
                continue
            column = self._column(ds, name, which)
            if name in self.pairs:
                values = self._column(ds, self.pairs[name], which)
                lo, hi = int(column[span.start]), int(column[span.stop])
                shifted = column[span.start:span.stop].astype(np.int64) - lo + self.ends[name]
                self.parts[name].append(shifted.astype(column.dtype))
                self.parts[self.pairs[name]].append(self._mapped(self.pairs[name],
                                                                 values[lo:hi], which))
                self.ends[name] += hi - lo
            elif len(column) == len(ds):  # one row a sample (source_crc32, orientation, ...)
                self.parts[name].append(self._mapped(name, column[span], which))
            else:
                raise PackError(f"{ds.root}: index field {name!r} has {len(column)} rows for "
                                f"{len(ds)} samples, which append and merge do not know how to "
                                "combine; pack the sources together instead.")

    def _mapped(self, name: str, values: np.ndarray, which: int) -> np.ndarray:
        field = self.remap.get(name)
        if field is None:
            return np.array(values)
        return self.maps[field][which][np.asarray(values, np.int64)].astype(values.dtype)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for name, parts in self.parts.items():
            if name in self.pairs:  # the closing prefix sum: every value taken
                parts = [*parts, np.asarray([self.ends[name]], dtype=parts[0].dtype)]
            out[name] = np.concatenate(parts)
        return out
