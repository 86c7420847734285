"""The int and float kinds: one int64 / float64 per sample, a tensor [B] in a batch; an int
field may carry class names (the label)."""

from __future__ import annotations

import math

import numpy as np

from fastloader.format.kinds.base import BadValue, Fixed, Spec, StoreContext


class IntKind(Fixed):
    """An int64 per sample; with class names, value k is classes[k] (a name is taken too)."""

    takes_classes = True

    def storage_dtype(self, spec: Spec) -> str:
        return "int64"

    def from_tuple(self, items: tuple[object, ...] | list[object]) -> dict[str, object] | None:
        return {"kind": self.name, "classes": items[1]} if len(items) == 2 else None

    def describe(self, spec: Spec) -> str:
        return self.name if spec.classes is None else f"int ({len(spec.classes)} classes)"

    def check_column(self, spec: Spec, arrays: dict[str, np.ndarray]) -> str | None:
        data = arrays["data"]
        if spec.classes is not None and data.size and (
            int(data.min()) < 0 or int(data.max()) >= len(spec.classes)
        ):
            return f"a label outside 0..{len(spec.classes) - 1}"
        return None

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> int:
        if isinstance(value, str) and spec.classes is not None and value in spec.classes:
            return spec.classes.index(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise BadValue(f"expected an int, got {type(value).__name__} {value!r:.40}")
        number = int(value)
        if not -(1 << 63) <= number < 1 << 63:
            raise BadValue(f"{number} does not fit in int64")
        if spec.classes is not None and not 0 <= number < len(spec.classes):
            raise BadValue(f"label {number} is outside its {len(spec.classes)} classes")
        return number

    def from_bytes(self, spec: Spec, data: bytes) -> int:
        return int(data.decode("utf-8").strip())

    def from_cell(self, spec: Spec, value: object, from_csv: bool) -> object:
        value = super().from_cell(spec, value, from_csv)
        if spec.classes is not None:  # a --label column: its names become ids in store()
            return str(value)
        return int(value) if from_csv and isinstance(value, str) else value


class FloatKind(Fixed):
    """A float64 per sample; an empty table cell is NaN."""

    def storage_dtype(self, spec: Spec) -> str:
        return "float64"

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise BadValue(f"expected a float, got {type(value).__name__} {value!r:.40}")
        return float(value)

    def from_bytes(self, spec: Spec, data: bytes) -> float:
        return float(data.decode("utf-8").strip())

    def from_cell(self, spec: Spec, value: object, from_csv: bool) -> object:
        if value is None:
            return math.nan
        if not from_csv or not isinstance(value, str):
            return float(value) if isinstance(value, int) and not isinstance(value, bool) else value
        return float(value)
