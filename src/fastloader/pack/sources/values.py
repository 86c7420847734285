"""One sample's field values checked against their declared kinds (runs in pool workers).

Every value becomes its stored form (int, float, an ndarray of the field's dtype, or bytes);
a value that does not fit its field is an error naming the sample, the field and what it got,
never a silent conversion (an int column never takes 2.5, a float never takes "x").
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from fastloader.decode.masks import map_mask
from fastloader.format.fields import FieldSpec
from fastloader.format.masks import MaskError, encode_mask, to_mask
from fastloader.pack.sources.validate import Prepared, prepare_data, read_source
from fastloader.pack.sources.validate import reject as _reject

WHERE_KEY = "__where__"  # importers: where the sample came from ("labels.csv line 14")
PATH_KEY = "__path__"  # importers: the source path kept in the index (else WHERE_KEY)
ERROR_KEY = "__error__"  # importers: this sample is bad already (a malformed line, ...): why


class TarMember(NamedTuple):
    """A member's data inside an uncompressed tar: read by the worker that checks it (the
    parent only walks the headers), so a tar's images are read in parallel."""

    tar: str
    offset: int
    size: int
    name: str


def read_member(member: TarMember) -> bytes:
    """The member's bytes; BadValue if the tar ends before them."""
    with open(member.tar, "rb") as handle:
        data = os.pread(handle.fileno(), member.size, member.offset)
    if len(data) != member.size:
        raise BadValue(f"{member.tar} member {member.name}: truncated ({len(data)} of "
                       f"{member.size} bytes)")
    return data


class BadValue(Exception):
    """A value that does not fit its field; the message says why."""


class PreparedSample(NamedTuple):
    """One sample's record (its first image field) and its other fields' stored values."""

    record: Prepared
    values: dict[str, Any]
    path: str


def _image_bytes(value: Any, max_file_size: int) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, TarMember):
        try:
            return read_member(value)
        except OSError as exc:
            raise BadValue(f"cannot read {value.tar}: {exc.strerror or exc}") from None
    if isinstance(value, (str, os.PathLike)):
        try:
            return read_source(os.fspath(value), max_file_size)
        except OSError as exc:
            raise BadValue(f"cannot read {os.fspath(value)!r}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise BadValue(f"{os.fspath(value)!r}: {exc}") from None
    raise BadValue(f"expected image bytes or a file path, got {type(value).__name__}")


def _int(spec: FieldSpec, value: Any) -> int:
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


def _float(value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise BadValue(f"expected a float, got {type(value).__name__} {value!r:.40}")
    return float(value)


def _ndarray(spec: FieldSpec, value: Any) -> np.ndarray:
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


def _boxes(spec: FieldSpec, value: Any) -> np.ndarray:
    """float32 [k, 4] XYXY: finite, positive width and height (an empty list is no boxes)."""
    if isinstance(value, (list, tuple)) and len(value) == 0:
        return np.zeros((0, 4), np.float32)
    boxes = _ndarray(spec, value)
    bad = ~np.isfinite(boxes).all(axis=1) | (boxes[:, 2] <= boxes[:, 0]) | (
        boxes[:, 3] <= boxes[:, 1])
    if bad.any():
        k = int(np.argmax(bad))
        raise BadValue(f"box {k} is {boxes[k].tolist()}: boxes are XYXY (x1, y1, x2, y2) in "
                       "source pixels with x2 > x1 and y2 > y1, all finite; fix or drop it")
    return boxes


def _per_box_lengths(specs: Sequence[FieldSpec], values: Mapping[str, Any]) -> str | None:
    """Why a sample's per-box fields are out of step with its boxes, or None."""
    for spec in (s for s in specs if s.kind == "boxes"):
        for name in spec.per_box:
            if len(values[name]) != len(values[spec.name]):
                return (f"field {name!r} has {len(values[name])} rows but {spec.name!r} has "
                        f"{len(values[spec.name])} boxes; a per-box field has one row a box")
    return None


def _blob(spec: FieldSpec, value: Any) -> bytes:
    if spec.kind == "text":
        if not isinstance(value, str):
            raise BadValue(f"expected text (str), got {type(value).__name__} {value!r:.40}")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadValue(f"not encodable as UTF-8 ({exc.reason})") from None
    if spec.kind == "bytes":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise BadValue(f"expected bytes, got {type(value).__name__}")
        return bytes(value)
    try:  # json: parsed values only; NaN and infinities are not JSON
        return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadValue(f"not JSON-serializable ({exc})") from None


def _mask(value: Any, max_file_size: int) -> np.ndarray:
    """A mask value as uint8 [H, W] (its size is checked against the image afterwards)."""
    try:
        return to_mask(value, lambda path: read_source(path, max_file_size))
    except MaskError as exc:
        raise BadValue(str(exc)) from None
    except ValueError as exc:  # read_source: over the size cap, not a regular file
        raise BadValue(f"{os.fspath(value)!r}: {exc}") from None


def _image_size(data: bytes) -> tuple[int, int]:
    """(height, width) of image bytes that already decoded once (their header)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.height, image.width


def _masks_to_records(specs: Sequence[FieldSpec], values: dict[str, Any], source: bytes,
                      record: Prepared) -> str | None:
    """Each mask checked against its image's size and stored (resized with the image when
    --max-side re-encoded it); why not, or None."""
    masks = [s for s in specs if s.kind == "mask"]
    if not masks:
        return None
    size = _image_size(source) if record.reencoded else (record.height, record.width)
    for spec in masks:
        mask = values[spec.name]
        if tuple(mask.shape) != size:
            return (f"field {spec.name!r} (mask) is {mask.shape[0]} x {mask.shape[1]} (H x W) "
                    f"but its image is {size[0]} x {size[1]}; a mask has its image's size")
        if record.reencoded:
            # nearest neighbour at output pixel centres, as the loader maps masks
            whole = np.array([0, 0, mask.shape[0], mask.shape[1]])
            mask = map_mask(mask, whole, False, (record.height, record.width))
        values[spec.name] = encode_mask(mask)
    return None


def stored_value(spec: FieldSpec, value: Any, max_file_size: int) -> Any:
    """value in the form its field stores (a mask: its uint8 array, stored by prepare_sample
    once its image's size is known); BadValue if it does not fit."""
    if spec.kind == "mask":
        return _mask(value, max_file_size)
    if spec.kind == "int":
        return _int(spec, value)
    if spec.kind == "float":
        return _float(value)
    if spec.kind == "boxes":
        return _boxes(spec, value)
    if spec.is_array:
        return _ndarray(spec, value)
    if spec.kind == "image":
        data = _image_bytes(value, max_file_size)
        checked = prepare_data(data)
        if checked.data is None:
            raise BadValue(checked.error or "not a decodable image")
        return data
    return _blob(spec, value)


class Limits(Protocol):
    """What preparing a sample reads of the pack's settings (staging/plan.TaskSettings)."""

    @property
    def max_side(self) -> int | None: ...

    @property
    def quality(self) -> int: ...

    @property
    def max_file_size(self) -> int: ...


def prepare_sample(sample: Any, specs: Sequence[FieldSpec], where: str,
                   settings: Limits) -> PreparedSample:
    """Check and convert one sample; never raises: a bad one comes back rejected, its reason
    naming where, the field and what is wrong."""
    if not isinstance(sample, Mapping):
        return PreparedSample(_reject(f"{where}: is {type(sample).__name__}, not a dict of "
                                      "field values"), {}, where)
    where = str(sample.get(WHERE_KEY, where))
    path = str(sample.get(PATH_KEY, where))
    if ERROR_KEY in sample:
        return PreparedSample(_reject(f"{where}: {sample[ERROR_KEY]}"), {}, path)
    names = {s.name for s in specs}
    extra = [k for k in sample if k not in names and k not in (WHERE_KEY, PATH_KEY)]
    if extra:
        return PreparedSample(_reject(f"{where}: has field {extra[0]!r}, which the dataset "
                                      f"does not declare ({sorted(names)}); declare it or drop "
                                      "it"), {}, path)
    values: dict[str, Any] = {}
    record: Prepared | None = None
    source = b""
    for spec in specs:
        if spec.name not in sample:
            return PreparedSample(_reject(f"{where}: has no field {spec.name!r}, which other "
                                          "samples have (every declared field is needed)"),
                                  {}, path)
        try:
            if record is None and spec.kind == "image":
                data = source = _image_bytes(sample[spec.name], settings.max_file_size)
                record = prepare_data(data, settings.max_side, settings.quality)
                if record.data is None:
                    raise BadValue(record.error or "not a decodable image")
                continue
            values[spec.name] = stored_value(spec, sample[spec.name], settings.max_file_size)
        except BadValue as exc:
            return PreparedSample(_reject(f"{where}: field {spec.name!r} ({spec.describe()}): "
                                          f"{exc}"), {}, path)
    assert record is not None  # check_specs: an image field is declared
    mismatch = _per_box_lengths(specs, values) or _masks_to_records(specs, values, source,
                                                                    record)
    if mismatch is not None:
        return PreparedSample(_reject(f"{where}: {mismatch}"), {}, path)
    return PreparedSample(record, values, path)
