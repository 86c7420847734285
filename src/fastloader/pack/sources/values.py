"""One sample's field values checked against their declared kinds (runs in pool workers).

Every value becomes its stored form (int, float, an ndarray of the field's dtype, or bytes) by
its kind's store() (format/kinds/); a value that does not fit its field is an error naming the
sample, the field and what it got, never a silent conversion (an int column never takes 2.5, a
float never takes "x").
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from fastloader.format.fields import FieldSpec, primary_image
from fastloader.format.kinds import BadValue
from fastloader.format.manifest import Codec
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


def _image_size(data: bytes) -> tuple[int, int]:
    """(height, width) of image bytes that already decoded once (their header)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.height, image.width


class _Store:
    """What a kind's store() reads sources with (format/kinds/base.py's StoreContext)."""

    def __init__(self, max_file_size: int) -> None:
        self.max_file_size = max_file_size

    def read(self, value: Any) -> bytes:
        return _image_bytes(value, self.max_file_size)

    def read_file(self, path: str) -> bytes:
        return read_source(path, self.max_file_size)

    def check_image(self, data: bytes) -> str | None:
        checked = prepare_data(data)
        return None if checked.data is not None else (checked.error or "not a decodable image")


class _Record:
    """The sample's stored record image (format/kinds/base.py's RecordImage)."""

    def __init__(self, record: Prepared, source: bytes) -> None:
        self.height, self.width, self.reencoded = record.height, record.width, record.reencoded
        self._source = source
        self._size: tuple[int, int] | None = None

    def source_size(self) -> tuple[int, int]:
        if self._size is None:  # read once however many fields ask
            self._size = _image_size(self._source)
        return self._size


def _fit_record(specs: Sequence[FieldSpec], values: dict[str, Any], source: bytes,
                record: Prepared) -> str | None:
    """Each value checked against the other fields' (per-box rows) and then its image (a
    mask's size: stored resized with the image when --max-side re-encoded it); why not, or
    None."""
    for spec in specs:
        problem = spec.kind.check_rows(spec, values)
        if problem is not None:
            return problem
    image = _Record(record, source)
    for spec in specs:
        if spec.name in values:
            values[spec.name], problem = spec.kind.fit_image(spec, values[spec.name], image)
            if problem is not None:
                return problem
    return None


def _kind_record(spec: FieldSpec, stored: Any) -> Prepared:
    """The record of a records kind other than image (audio): its stored bytes as given, its
    kind's shape row; the stored value (its meta) stays among the values."""
    data = stored.value if spec.kind.meta else stored
    height, width = spec.kind.record_shape(spec, stored)
    return Prepared(data, height, width, int(Codec.UNKNOWN), zlib.crc32(data), None, False)


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
    records = primary_image(specs).name
    store = _Store(settings.max_file_size)
    record: Prepared | None = None
    source = b""
    for spec in specs:
        if spec.name not in sample:
            return PreparedSample(_reject(f"{where}: has no field {spec.name!r}, which other "
                                          "samples have (every declared field is needed)"),
                                  {}, path)
        try:
            if record is None and spec.kind.is_image:
                data = source = _image_bytes(sample[spec.name], settings.max_file_size)
                record = prepare_data(data, settings.max_side, settings.quality)
                if record.data is None:
                    raise BadValue(record.error or "not a decodable image")
                continue
            values[spec.name] = spec.kind.store(spec, sample[spec.name], store)
            if record is None and spec.kind.records and spec.name == records:
                record = _kind_record(spec, values[spec.name])
        except BadValue as exc:
            return PreparedSample(_reject(f"{where}: field {spec.name!r} ({spec.describe()}): "
                                          f"{exc}"), {}, path)
    assert record is not None  # check_specs: an image field is declared
    mismatch = _fit_record(specs, values, source, record)
    if mismatch is not None:
        return PreparedSample(_reject(f"{where}: {mismatch}"), {}, path)
    return PreparedSample(record, values, path)
