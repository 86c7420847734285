"""Boxes and masks in tables and file groups, spelled as the COCO importer spells them.

Tables: a column `boxes` (JSON `[[x1, y1, x2, y2], ...]`, XYXY source pixels; an empty cell is
no boxes) with per-box columns `box_labels` (JSON ints) and `iscrowd` (JSON 0/1) kept in step,
and a column `mask` holding a PNG path (relative like the image paths). `--field COL:boxes` and
`--field COL:mask` declare columns of other names.
File groups (WebDataset): a member `KEY.mask.png` is the field `mask`; a member
`KEY.boxes.json` holds a list of boxes, or an object whose keys become fields: `boxes`, and
`box_labels` and `iscrowd` kept in step with them.
Boxes with no area are refused naming the box (sources/values.py, like the COCO importer); boxes
reaching outside the image are kept (clipped when loaded).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from fastloader.format import kinds
from fastloader.format.fields import FieldSpec
from fastloader.format.kinds import HoldsBoxes
from fastloader.pack.sources.values import ERROR_KEY, BadValue, TarMember, read_member

# the field (column, member, key) names that take the boxes and mask kinds undeclared
BOXES_NAME, MASK_NAME = "boxes", "mask"
PER_BOX: dict[str, tuple[str, str, tuple[int, ...]]] = {"box_labels": ("ndarray", "int64", (-1,)),
                                                       "iscrowd": ("ndarray", "uint8", (-1,))}
MASK_MEMBER, BOXES_MEMBER = "mask.png", "boxes.json"


def declares_boxes(overrides: Mapping[str, object]) -> bool:
    """Whether --field / fields= declares a boxes field."""
    return any(isinstance(kinds.find(v[0] if isinstance(v, (tuple, list)) and v else v),
                          HoldsBoxes) for v in overrides.values())


def default_kind(name: str, names: Sequence[str], boxes: bool = False
                 ) -> str | tuple[object, ...] | None:
    """The kind a column or group field takes by its name (None: inferred as before); boxes:
    another column is declared boxes."""
    if name == BOXES_NAME:
        return (kinds.BOXES.name, [n for n in PER_BOX if n in names])
    if name in PER_BOX and (boxes or BOXES_NAME in names):
        return PER_BOX[name]
    if name == MASK_NAME:
        return kinds.MASK.name
    return None


def with_per_box(specs: list[FieldSpec]) -> list[FieldSpec]:
    """A boxes field declared without per-box fields (`--field COL:boxes`) takes the declared
    box_labels / iscrowd fields as its per-box fields."""
    names = {s.name: s for s in specs}
    owned = {n for s in specs for n in s.per_box}
    return [dataclasses.replace(s, per_box=tuple(
        n for n in PER_BOX if n in names and n not in owned and names[n].is_array))
        if isinstance(s.kind, HoldsBoxes) and not s.per_box else s for s in specs]


def typed(value: object, spec: FieldSpec) -> object:
    """An empty list as an empty array of the field's dtype (no boxes, no labels); anything
    else as it is (pack/sources/values.py checks it)."""
    if not isinstance(value, list) or not spec.is_array:
        return value
    if not value:
        return np.zeros((0, *(max(n, 0) for n in (spec.shape or (-1,))[1:])), spec.dtype)
    if spec.name in PER_BOX and all(isinstance(v, int) and not isinstance(v, bool)
                                    for v in value):
        info = np.iinfo(np.dtype(spec.dtype))  # iscrowd's 0/1 into uint8
        if all(info.min <= v <= info.max for v in value):
            return np.asarray(value, spec.dtype)
    return value


def cell_array(value: object, spec: FieldSpec) -> object:
    """A table cell of an array column: JSON text (CSV) parsed, empty = no rows; ValueError
    (malformed JSON) becomes that row's error."""
    if value is None:
        value = []
    elif isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"is not JSON ({exc}); write boxes as [[x1, y1, x2, y2], ...]"
                             ) from None
    return typed(value, spec)


def expand_group(group: dict[str, object], read: Callable[[object], bytes]
                 ) -> dict[str, object]:
    """A file group's members with `mask.png` renamed to `mask` and `boxes.json` split into its
    fields; {ERROR_KEY: why} if the boxes member is malformed."""
    if MASK_MEMBER not in group and BOXES_MEMBER not in group:
        return group
    out = {k: v for k, v in group.items() if k not in (MASK_MEMBER, BOXES_MEMBER)}
    clash = {MASK_NAME, *PER_BOX, BOXES_NAME} & set(out)
    if clash:
        return {ERROR_KEY: f"has both {sorted(clash)[0]!r} and a .{MASK_MEMBER} or "
                           f".{BOXES_MEMBER} member naming the same field; keep one"}
    if MASK_MEMBER in group:
        member = group[MASK_MEMBER]
        try:
            out[MASK_NAME] = read_member(member) if isinstance(member, TarMember) else member
        except (BadValue, OSError) as exc:
            return {ERROR_KEY: f".{MASK_MEMBER} cannot be read ({exc})"}
    if BOXES_MEMBER in group:
        try:
            parsed = json.loads(read(group[BOXES_MEMBER]).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            return {ERROR_KEY: f".{BOXES_MEMBER} is not JSON ({exc})"}
        if isinstance(parsed, list):
            parsed = {BOXES_NAME: parsed}
        if not isinstance(parsed, dict) or BOXES_NAME not in parsed or set(parsed) - {
                BOXES_NAME, *PER_BOX}:
            return {ERROR_KEY: f".{BOXES_MEMBER} is {json.dumps(parsed)[:60]}; write a list "
                               "of [x1, y1, x2, y2] or an object with 'boxes' and optionally "
                               "'box_labels' and 'iscrowd' lists"}
        out |= {name: Parsed(value) for name, value in parsed.items()}
    return out


class Parsed:
    """A group field's value already read (from a .boxes.json): used as it is."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value
