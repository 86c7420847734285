"""The ndarray kind: a numeric array per sample of a declared dtype and shape (-1: a variable
dimension). Fixed shapes are one (N, ...) column and a tensor [B, ...] in a batch; variable ones
are values + offsets + shapes and a list of B tensors (padded, or multi-hot, on request)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import numpy as np
import numpy.typing as npt

from fastloader.errors import InvalidArgumentError
from fastloader.format.kinds.base import Bad, BadValue, Batch, Kind, Spec, StoreContext
from fastloader.format.kinds.device import arrays_to_device, to_tensor

if TYPE_CHECKING:
    import torch



def check_dtype(dtype: object, bad: type[Exception], where: str) -> str:
    """A numeric numpy dtype's name; bad naming where otherwise."""
    try:
        parsed = np.dtype(cast("npt.DTypeLike", dtype))  # anything is tried: TypeError says no
    except TypeError:
        parsed = np.dtype(object)
    if parsed.hasobject or parsed.kind not in "biuf" or parsed.itemsize == 0:
        raise bad(f"{where}: dtype {dtype!r:.40} is not a numeric dtype (bool, int, uint, float); "
                  "use one such as 'float32'.")
    return str(parsed)


def check_shape(shape: object, bad: type[Exception], where: str) -> tuple[int, ...]:
    """Up to 8 sizes >= 0 or -1 (variable); bad naming where otherwise."""
    if not isinstance(shape, (list, tuple)) or len(shape) > 8 or not all(
        isinstance(n, int) and not isinstance(n, bool) and (n >= 0 or n == -1) for n in shape
    ):
        raise bad(f"{where}: shape {shape!r:.60} is not a list of up to 8 sizes >= 0 (or -1 for "
                  "a variable dimension); e.g. (512,) or (-1, 4).")
    return tuple(shape)


def as_array(spec: Spec, value: object) -> np.ndarray:
    """value as a contiguous array of the field's dtype and shape; BadValue if it does not fit
    (a safe cast only: 2.5 never becomes an int)."""
    if isinstance(value, (str, bytes, dict)) or value is None:
        raise BadValue(f"expected an array, got {type(value).__name__}")
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise BadValue(f"not an array ({exc})") from None
    dtype = np.dtype(spec.dtype)
    if array.dtype != dtype:
        if array.dtype.kind not in "biuf" or not np.can_cast(array.dtype, dtype, "same_kind"):
            raise BadValue(f"dtype {array.dtype} cannot become the field's {dtype}")
        array = array.astype(dtype)
    want = spec.shape or ()
    if array.ndim != len(want) or any(
        w not in (-1, n) for w, n in zip(want, array.shape, strict=True)
    ):
        raise BadValue(f"shape {array.shape} does not fit the field's {tuple(want)} "
                       "(-1: any length)")
    return np.ascontiguousarray(array)


class NdarrayKind(Kind):
    """A numeric array per sample: ("ndarray", DTYPE, SHAPE)."""

    def from_tuple(self, items: tuple[object, ...] | list[object]) -> dict[str, object] | None:
        return ({"kind": self.name, "dtype": items[1], "shape": items[2]} if len(items) == 3
                else None)

    def build(self, name: str, entry: Mapping[str, object], bad: type[Exception], where: str
              ) -> dict[str, object]:
        return {"dtype": check_dtype(entry.get("dtype"), bad, f"{where}: field {name!r}"),
                "shape": check_shape(entry.get("shape"), bad, f"{where}: field {name!r}")}

    def to_json(self, spec: Spec) -> dict[str, object]:
        return {"dtype": spec.dtype, "shape": list(spec.shape or ())}

    def describe(self, spec: Spec) -> str:
        return f"ndarray {spec.dtype} {tuple(spec.shape or ())}"

    def bare(self) -> str | tuple[object, ...]:
        """float64 with one variable dim: pack/sources/groups.py takes the dtype and ndim of
        the field's first value."""
        return (self.name, "float64", (-1,))

    def variable(self, spec: Spec) -> bool:
        return -1 in (spec.shape or ())

    def as_array(self, spec: Spec, value: object) -> np.ndarray:
        """value as a contiguous array of the field's dtype and shape; BadValue if it does not
        fit (a safe cast only)."""
        return as_array(spec, value)

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> np.ndarray:
        return self.as_array(spec, value)

    def from_bytes(self, spec: Spec, data: bytes) -> np.ndarray:
        return np.load(io.BytesIO(data), allow_pickle=False)

    def load(self, spec: Spec, blob: np.ndarray, shape: np.ndarray, fail: Bad) -> np.ndarray:
        return np.asarray(blob).reshape(tuple(int(d) for d in shape))

    def collate(self, spec: Spec, batch: Batch, indices: np.ndarray,
                device: torch.device
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | list[torch.Tensor]:
        values = batch.values(spec.name, indices)
        if not spec.variable:
            return to_tensor(values, device)
        if spec.name in batch.multi_hot:
            return multi_hot(spec.name, values, batch.multi_hot[spec.name], device)
        if batch.padded and -1 not in (spec.shape or ())[1:]:
            return padded(values, np.dtype(spec.dtype), device)
        return arrays_to_device(values, device)


def multi_hot(name: str, values: list[np.ndarray], classes: int,
              device: torch.device) -> torch.Tensor:
    """[B, classes] float32 with 1 at each listed class of each sample."""
    import torch

    # one scatter for the batch: the ids of every sample, each beside its row number
    ids = (np.concatenate([np.asarray(v, np.int64).reshape(-1) for v in values])
           if values else np.zeros(0, np.int64))
    rows = np.repeat(np.arange(len(values)), [np.size(v) for v in values])
    outside = np.flatnonzero((ids < 0) | (ids >= classes))
    if outside.size:
        first = int(outside[0])
        raise InvalidArgumentError(
            f"multi_hot={classes} is invalid for field {name!r}: a sample (row "
            f"{int(rows[first])} of the batch) lists class {int(ids[first])}. Pass the "
            "dataset's class count.")
    out = np.zeros((len(values), classes), np.float32)
    out[rows, ids] = 1.0
    return torch.from_numpy(out).to(device)


def padded(values: list[np.ndarray], dtype: np.dtype, device: torch.device
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """(values zero-padded along dim 0 to the longest, lengths) of arrays variable in dim 0."""
    import torch

    lengths = np.array([len(v) for v in values], np.int64)
    rest = values[0].shape[1:] if values else ()
    out = np.zeros((len(values), int(lengths.max(initial=0)), *rest), dtype)
    for row, value in enumerate(values):
        out[row, : len(value)] = value
    return torch.from_numpy(out).to(device), torch.from_numpy(lengths).to(device)
