"""The text, json and bytes kinds: a variable run of bytes per sample (UTF-8 text, compact JSON,
raw bytes), a list of B Python values in a batch."""

from __future__ import annotations

import json

import numpy as np

from fastloader.format.kinds.base import Bad, BadValue, Kind, Spec, StoreContext, utf8


class TextKind(Kind):
    """A str per sample, stored as UTF-8; an empty table cell is ''."""

    verified = True

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> bytes:
        if not isinstance(value, str):
            raise BadValue(f"expected text (str), got {type(value).__name__} {value!r:.40}")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadValue(f"not encodable as UTF-8 ({exc.reason})") from None

    def from_bytes(self, spec: Spec, data: bytes) -> str:
        return data.decode("utf-8")

    def from_cell(self, spec: Spec, value: object, from_csv: bool) -> object:
        return "" if value is None else value

    def load(self, spec: Spec, blob: np.ndarray, shape: np.ndarray | None, fail: Bad) -> object:
        return utf8(spec, blob, fail, parse=False)


class JsonKind(Kind):
    """A parsed JSON value per sample (NaN and infinities refused); an empty cell is None."""

    verified = True

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> bytes:
        try:  # parsed values only; NaN and infinities are not JSON
            return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise BadValue(f"not JSON-serializable ({exc})") from None

    def from_bytes(self, spec: Spec, data: bytes) -> object:  # parsed JSON
        return json.loads(data.decode("utf-8"))

    def from_cell(self, spec: Spec, value: object, from_csv: bool) -> object:
        if value is None:
            return None
        return json.loads(value) if from_csv and isinstance(value, str) else value

    def load(self, spec: Spec, blob: np.ndarray, shape: np.ndarray | None, fail: Bad) -> object:
        return utf8(spec, blob, fail, parse=True)


class BytesKind(Kind):
    """Raw bytes per sample, as given."""

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise BadValue(f"expected bytes, got {type(value).__name__}")
        return bytes(value)
