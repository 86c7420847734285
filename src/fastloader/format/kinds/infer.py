"""The kind a table column takes from its cells when none is declared (pack/tables.py): CSV
cells that all parse as ints are int, as numbers float, else text; JSON values keep their type
(lists and objects are json)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from fastloader.format.kinds import FLOAT, INT, JSON, TEXT, Kind


def cell_kind(value: object, from_csv: bool) -> Kind:
    """The kind of one non-empty cell (CSV: its text)."""
    if from_csv:
        for kind, parse in ((INT, int), (FLOAT, float)):
            try:
                parse(cast(str, value))  # a CSV cell is its text
                return kind
            except ValueError:
                pass
        return TEXT
    if isinstance(value, (bool, list, dict)):
        return JSON
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return FLOAT
    return TEXT if isinstance(value, str) else JSON


def infer_kind(cells: Sequence[object], from_csv: bool) -> Kind:
    """The kind of a column from its non-empty cells, in row order."""
    kinds = {cell_kind(value, from_csv) for value in cells}
    numbers = {INT, FLOAT}
    if not from_csv and len(kinds - numbers) == 1 and kinds & numbers:
        # JSON values of two kinds: the column takes its first value's kind, and a value of
        # another kind is that row's error (values.py names it), not a silent json column
        first = cell_kind(cells[0], False)
        return FLOAT if first in numbers and FLOAT in kinds else first
    if not kinds:  # every cell empty
        return TEXT if from_csv else JSON
    if kinds <= {INT}:
        return INT
    if kinds <= numbers:
        return FLOAT
    return TEXT if kinds == {TEXT} else JSON
