"""Declared sample fields of a format v2 dataset: kinds, their specs and how each is stored.

A field is name -> kind (image, int, float, ndarray, boxes, mask, text, bytes, json: each a
class of format/kinds/, which says what the kind means at every stage), with a dtype
and shape for ndarray (-1 marks a variable dimension), class names for a label int, and for boxes
(float32 [k, 4] XYXY in source pixels) the names of its per-box fields. A mask is a uint8 [H, W]
label image the size of the first image field, stored as a compressed blob (format/masks.py).
The first image field is the dataset's records (the shards, read by the fused decode path);
every other field is a column of index arrays under index/: a fixed-size field is one (N, ...)
array, a variable one is flat `values` plus (N+1,) `offsets` (and an (N, ndim) `shapes` for
variable ndarrays), so a value is a slice of a memory-mapped file, never a pickle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fastloader.errors import DatasetError, InvalidArgumentError
from fastloader.format import kinds
from fastloader.format.kinds import Arrays, EncodedImage, Facts, HoldsBoxes, Kind, is_records

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")
FIELD_PREFIX = "field."  # index array names of the columns: field.NAME[.values|.offsets|.shapes]


@dataclass(frozen=True, init=False)
class FieldSpec:
    """One declared field.

    Attributes:
        name: the field's name (a key of ds.sample(i)).
        kind: its Kind (format/kinds/), a str equal to the kind's name ("text", ...); given
            as a name it is resolved to the registered kind.
        dtype: the numpy dtype of an ndarray field (int64 for int, float64 for float).
        shape: an ndarray field's per-sample shape; -1 marks a variable dimension.
        classes: class names of a label int field (value k is classes[k]).
        per_box: a boxes field's per-box fields (one row per box, kept in step when boxes
            are dropped), e.g. ("box_labels", "iscrowd").
    """

    name: str
    kind: Kind
    dtype: str | None
    shape: tuple[int, ...] | None
    classes: tuple[str, ...] | None
    per_box: tuple[str, ...]

    def __init__(self, name: str, kind: str, dtype: str | None = None,
                 shape: tuple[int, ...] | None = None, classes: tuple[str, ...] | None = None,
                 per_box: tuple[str, ...] = ()) -> None:
        for key, value in (("name", name), ("kind", kinds.get(kind)), ("dtype", dtype),
                           ("shape", shape), ("classes", classes), ("per_box", per_box)):
            object.__setattr__(self, key, value)

    # is_array and variable follow from kind and shape, fixed at construction: worked out once
    # (a reader asks them for every sample it reads), kept out of the compared fields
    @cached_property
    def is_array(self) -> bool:
        """A numeric array per sample (ndarray, boxes)."""
        return isinstance(self.kind, Arrays)

    @cached_property
    def variable(self) -> bool:
        """Stored as values + offsets (text, bytes, json, image, mask, arrays with a -1 dim)."""
        return self.kind.variable(self)

    @property
    def storage_dtype(self) -> str:
        """The dtype of the stored values."""
        return self.kind.storage_dtype(self)

    def arrays(self, records: bool = False) -> dict[str, str]:
        """Role ("data", "values", "offsets", "shapes", "meta") -> index array name; records:
        this field is the dataset's records (its values are in the shards: its meta only)."""
        base = FIELD_PREFIX + self.name
        names = {"meta": base + ".meta"} if isinstance(self.kind, Facts) else {}
        if records:
            return names
        if not self.variable:
            return {"data": base, **names}
        names |= {"values": base + ".values", "offsets": base + ".offsets"}
        if self.is_array:
            names["shapes"] = base + ".shapes"
        return names

    def to_json(self) -> dict[str, object]:
        """The manifest entry of this field."""
        entry: dict[str, object] = {"name": self.name, "kind": self.kind.name,
                                    **self.kind.to_json(self)}
        if self.classes is not None:  # only a kind that takes classes has them
            entry["classes"] = list(self.classes)
        return entry

    def describe(self) -> str:
        """'ndarray float32 (512,)', 'int (10 classes)', 'text', ..."""
        return self.kind.describe(self)


def _check_name(name: object, bad: type[Exception], where: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise bad(f"{where}: field name {name!r:.60} is not 1-64 letters, digits, '_', '-' or "
                  "'.' (not starting with '.'); rename the field.")
    return name


def _from_tuple(name: str, spec: tuple[object, ...] | list[object], bad: type[Exception],
                where: str) -> dict[str, Any]:
    kind = kinds.find(spec[0])
    entry = None if kind is None else kind.from_tuple(spec)
    if entry is None:
        raise bad(f"{where}: field {name!r} is {spec!r:.80}; write a kind ('text'), "
                  "('ndarray', DTYPE, SHAPE), ('int', CLASS_NAMES) or "
                  "('boxes', PER_BOX_FIELDS).")
    return entry


def make_spec(name: str, spec: Any, bad: type[Exception] = InvalidArgumentError,
              where: str = "fields") -> FieldSpec:
    """A FieldSpec from what a user writes: "text", ("ndarray", "float32", (512,)),
    ("int", ["cat", "dog"]), ("boxes", ["box_labels"]) (per-box fields), or a manifest-style
    dict {"kind": ..., "dtype": ..., ...}."""
    _check_name(name, bad, where)
    if isinstance(spec, str):
        spec = {"kind": spec}
    elif isinstance(spec, (tuple, list)) and spec:
        spec = _from_tuple(name, spec, bad, where)
    kind = kinds.find(spec.get("kind")) if isinstance(spec, Mapping) else None
    if kind is None:
        raise bad(f"{where}: field {name!r} has kind {spec!r:.80}; choose one of "
                  f"{', '.join(kinds.names())}.")
    classes = None
    if spec.get("classes") is not None:
        names = spec["classes"]
        if not kind.takes_classes or not isinstance(names, (list, tuple)) or not all(
            isinstance(c, str) for c in names
        ):
            raise bad(f"{where}: field {name!r}: class names belong to an int field and must "
                      "be a list of strings.")
        classes = tuple(names)
    return FieldSpec(name, kind, classes=classes, **kind.build(name, spec, bad, where))


def _check_per_box(specs: Sequence[FieldSpec], bad: type[Exception], where: str) -> None:
    """Each per-box field is declared once, an array variable in its first dim (one row a box)."""
    by_name = {s.name: s for s in specs}
    owners: dict[str, str] = {}
    for spec in specs:
        for name in spec.per_box:
            other = by_name.get(name)
            if other is None or not other.is_array or isinstance(other.kind, HoldsBoxes) or (
                    (other.shape or (0,))[:1] != (-1,)):
                raise bad(f"{where}: boxes field {spec.name!r} lists per-box field {name!r}, "
                          "which must be a declared ndarray field variable in its first "
                          "dimension, e.g. ('ndarray', 'int64', (-1,)).")
            if name in owners:
                raise bad(f"{where}: field {name!r} is per-box of both {owners[name]!r} and "
                          f"{spec.name!r}; a per-box field belongs to one boxes field.")
            owners[name] = spec.name


def parse_fields(fields: object) -> list[FieldSpec]:
    """pack()'s fields= mapping, in its order; InvalidArgumentError naming a bad entry."""
    if not isinstance(fields, Mapping) or not fields:
        raise InvalidArgumentError(
            f"fields={fields!r:.80} is invalid: give a dict of field name -> kind, e.g. "
            "{'image': 'image', 'label': 'int', 'caption': 'text'}."
        )
    specs = [make_spec(name, spec) for name, spec in fields.items()]
    check_specs(specs, InvalidArgumentError, "fields")
    return specs


def check_specs(specs: Sequence[FieldSpec], bad: type[Exception], where: str) -> None:
    """Names unique, one image field at least (the first one is the records), at most one
    int field with class names (the label)."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise bad(f"{where}: a field name appears twice in {names}; names must be unique.")
    if not any(is_records(s.kind) for s in specs):
        kinds_named = " or ".join(repr(k) for k in kinds.names() if is_records(kinds.get(k)))
        raise bad(f"{where}: no field of kind {kinds_named} among {names}; a packed dataset "
                  "stores one image (or clip) per sample (its records): declare one.")
    if sum(s.classes is not None for s in specs) > 1:
        raise bad(f"{where}: more than one int field has class names; only the label has.")
    _check_per_box(specs, bad, where)


def specs_from_manifest(raw: object, where: str) -> list[FieldSpec]:
    """manifest.json's sample_fields list as specs; DatasetError naming what is wrong."""
    if not isinstance(raw, list):
        raise DatasetError(f"{where}: sample_fields is not a list; the dataset is damaged: "
                           "pack it again.")
    specs = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise DatasetError(f"{where}: a sample_fields entry is {entry!r:.60}, not an object; "
                               "the dataset is damaged: pack it again.")
        specs.append(make_spec(entry.get("name"), entry, DatasetError, where))  # type: ignore[arg-type]
    check_specs(specs, DatasetError, where)
    return specs


def primary_image(specs: Sequence[FieldSpec]) -> FieldSpec:
    """The field stored as the records: the first image field declared, else the first of
    another records kind (an audio clip in a dataset without images)."""
    return next((s for s in specs if isinstance(s.kind, EncodedImage)),
                next(s for s in specs if is_records(s.kind)))


def label_field(specs: Sequence[FieldSpec]) -> FieldSpec | None:
    """The int field whose values are the dataset's labels: the one with class names, else one
    named label or cls, else the only int field of an image + int dataset."""
    named = [s for s in specs if s.classes is not None]
    if named:
        return named[0]
    ints = [s for s in specs if s.kind.takes_classes]
    by_name = [s for s in ints if s.name in ("label", "cls")]
    if by_name:
        return by_name[0]
    return ints[0] if len(specs) == 2 and len(ints) == 1 else None


def is_classification(specs: Sequence[FieldSpec]) -> bool:
    """Exactly one image field and one label int field."""
    return len(specs) == 2 and label_field(specs) is not None
