"""One sample's field values checked against their declared kinds (runs in pool workers).

An image value is bytes, a file path, a tar member or a Parquet cell (read here), or a PIL
image, encoded here once: PNG (lossless) unless pack(pil_format=...) chose JPEG.

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
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from fastloader.decode.pillow import to_rgb
from fastloader.errors import OptionalDependencyError
from fastloader.format.fields import FieldSpec, primary_image
from fastloader.format.kinds import BadValue, Clips, EncodedImage, Facts
from fastloader.format.manifest import Codec
from fastloader.pack.sources.hf_features import image_source
from fastloader.pack.sources.types import StorageOptions
from fastloader.pack.sources.validate import (
    ListedFile,
    Prepared,
    prepare_data,
    read_listed,
    read_source,
)
from fastloader.pack.sources.validate import reject as _reject

if TYPE_CHECKING:
    from PIL import Image

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


PIL_FORMATS = ("png", "jpeg")  # what PIL images are encoded as (png: lossless, the default)
_PNG_MODES = ("1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16")


class EncodeAs(NamedTuple):
    """A PIL image to be stored in another format than PNG (pack(pil_format=...)), encoded
    by the worker that checks it."""

    image: Image.Image
    format: str  # one of PIL_FORMATS
    quality: int  # JPEG's


def is_pil(value: object) -> bool:
    """Whether value is a PIL image (Pillow imported only when it may be one)."""
    if not type(value).__module__.startswith("PIL."):
        return False
    from PIL import Image

    return isinstance(value, Image.Image)


def encode_pil(image: Image.Image, format: str = "png", quality: int = 90) -> bytes:
    """A PIL image encoded once: PNG (lossless; modes PNG cannot hold, such as CMYK, as RGB)
    or JPEG at quality (RGB or grey)."""
    buffer = io.BytesIO()
    if format == "png":
        if image.mode not in _PNG_MODES:
            image = image.convert("RGBA" if "A" in image.mode else "RGB")
        image.save(buffer, format="PNG")
    else:
        if image.mode not in ("L", "RGB"):
            image = to_rgb(image)  # a 16-bit image by its high byte: convert("RGB") gives white
        image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


class ParquetCell(NamedTuple):
    """One image cell of a Parquet file, read later (read_cell) by the worker that checks it;
    its repr (an item's key on resume) changes with the file's size or mtime."""

    file: str
    row_group: int
    row: int  # within the row group
    column: str
    base: str  # the folder a struct's relative path is under
    size: int  # the column's bytes in this row group, per row: the shard plan's size hint
    stamp: tuple[int, int]  # the file's (size, mtime_ns)
    # where the cell's bytes lie in the file (parquet_pages: a plain, uncompressed column),
    # read with one pread; -1: read through pyarrow, by row group
    offset: int = -1
    length: int = -1


def pyarrow_parquet(where: object) -> ModuleType:
    """pyarrow.parquet, or OptionalDependencyError naming where it was needed."""
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        raise OptionalDependencyError(f"{where}: reading .parquet needs pyarrow; pip install "
                                      "pyarrow, or export the table as CSV.") from None
    return pq


# this process's last row group read: its key and arrays (pyarrow's, which has no stubs)
_LAST: dict[str, Any] = {}
_FILES: dict[tuple[str, tuple[int, int], int], Any] = {}  # open pyarrow ParquetFiles


def _row_group(cell: ParquetCell) -> dict[str, Any]:
    """The cells of cell's column in its row group (Arrow arrays: cells, and a struct's bytes
    and path fields), read once per process and row group: a worker's next cells are mostly
    of the same group. The file is memory-mapped (a third of the CPU of reading it) and its
    size and mtime checked against the pack's before each group is read: a file changed
    since is an error, not other rows (nor a worker killed by a map cut short)."""
    opened = (cell.file, cell.stamp, os.getpid())  # a file written again is opened again
    key = (*opened, cell.row_group, cell.column)
    if _LAST.get("key") != key:
        try:
            _checked_stamp(cell, os.stat(cell.file))
            if opened not in _FILES:
                if len(_FILES) >= 8:
                    _FILES.clear()
                _FILES[opened] = pyarrow_parquet(cell.file).ParquetFile(cell.file,
                                                                        memory_map=True)
            column = _FILES[opened].read_row_group(cell.row_group, columns=[cell.column],
                                                   use_threads=False)
        except OSError:
            raise
        except Exception as exc:  # pyarrow's own errors: a damaged row group
            raise OSError(f"row group {cell.row_group}: {type(exc).__name__}: {exc}") from None
        _LAST.clear()
        cells = column.column(0).combine_chunks()
        struct = bool(cells.type.num_fields)  # datasets' {bytes, path}, else a binary column
        _LAST.update(key=key, cells=cells, bytes=cells.field("bytes") if struct else None,
                     path=cells.field("path") if struct and cells.type.get_field_index(
                         "path") >= 0 else None)
    return _LAST


def read_locality(sample: object) -> tuple[str, int] | None:
    """The (file, row group) of a sample's first Parquet cell read through pyarrow
    (_row_group decodes a group's column whole, so its cells are read cheapest by one
    worker), or None without one (a located cell is one pread, like any file)."""
    values = sample.values() if isinstance(sample, dict) else ()
    cell = next((v for v in values if isinstance(v, ParquetCell)), None)
    return None if cell is None or cell.offset >= 0 else (cell.file, cell.row_group)


def _checked_stamp(cell: ParquetCell, info: os.stat_result) -> None:
    if (info.st_size, info.st_mtime_ns) != tuple(cell.stamp):
        raise OSError("the file changed since the pack read its rows (its size or mtime "
                      "differ); pack it again")


def _located(cell: ParquetCell) -> bytes:
    """A located cell's bytes, read where the parent found them (the file's stamp checked
    first, as a row group's read checks it)."""
    with open(cell.file, "rb") as handle:
        _checked_stamp(cell, os.fstat(handle.fileno()))
        data = os.pread(handle.fileno(), cell.length, cell.offset)
    if len(data) != cell.length:
        raise OSError(f"the file ends inside row {cell.row}'s value")
    return data


def read_cell(cell: ParquetCell) -> bytes | str:
    """A cell's image bytes, or the path (under its base) of a struct without bytes; OSError
    if the file cannot be read, ValueError if the cell holds no image."""
    if cell.offset >= 0:
        return _located(cell)
    group = _row_group(cell)
    if group["bytes"] is None or not group["cells"][cell.row].is_valid:  # binary, or null
        value = image_source(group["cells"][cell.row].as_py())
    else:  # the struct's fields read apart: no dict per cell, the path only without bytes
        data = group["bytes"][cell.row].as_py()
        names = group["path"] if data is None else None
        path = names[cell.row].as_py() if names is not None else None
        value = image_source({"bytes": data, "path": path})
    if isinstance(value, str):
        return os.path.join(cell.base, value)
    return cast(bytes, value)  # a binary cell or a struct's bytes: pyarrow reads them as bytes


class PreparedSample(NamedTuple):
    """One sample's record (its first image field) and its other fields' stored values."""

    record: Prepared
    # each kind's store() result (untyped in format/kinds), read by staging/items.py
    values: dict[str, Any]
    path: str


def _image_bytes(value: object, max_file_size: int,
                 storage_options: StorageOptions | None = None) -> bytes:
    if isinstance(value, ParquetCell):
        cell = value
        try:
            value = read_cell(cell)
        except OSError as exc:
            raise BadValue(f"cannot read {cell.file} row group {cell.row_group}: "
                           f"{exc.strerror or exc}") from None
        except ValueError as exc:
            raise BadValue(f"column {cell.column!r} {exc}") from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, ListedFile):
        return read_listed(value, max_file_size, storage_options)
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
    if isinstance(value, EncodeAs):
        return encode_pil(*value)
    if is_pil(value):
        return encode_pil(cast("Image.Image", value))
    raise BadValue(f"expected image bytes, a file path or a PIL image, got "
                   f"{type(value).__name__}")


def _image_size(data: bytes) -> tuple[int, int]:
    """(height, width) of image bytes that already decoded once (their header)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.height, image.width


class _Store:
    """What a kind's store() reads sources with (format/kinds/base.py's StoreContext)."""

    def __init__(self, max_file_size: int) -> None:
        self.max_file_size = max_file_size

    def read(self, value: object) -> bytes:
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


def _fit_record(specs: Sequence[FieldSpec], values: dict[str, object], source: bytes,
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


def _kind_record(spec: FieldSpec, kind: Clips, stored: Any) -> Prepared:
    """The record of clips (audio): its stored bytes as given, its kind's shape row; the stored
    value (its meta) stays among the values. (stored: store()'s result, untyped in
    format/kinds.)"""
    data = stored.value if isinstance(kind, Facts) else stored
    height, width = kind.record_shape(spec, stored)
    return Prepared(data, height, width, int(Codec.UNKNOWN), zlib.crc32(data), None, False)


class Limits(Protocol):
    """What preparing a sample reads of the pack's settings (staging/plan.TaskSettings)."""

    @property
    def max_side(self) -> int | None: ...

    @property
    def quality(self) -> int: ...

    @property
    def max_file_size(self) -> int: ...

    @property
    def apply_exif_orientation(self) -> bool: ...

    @property
    def storage_options(self) -> StorageOptions | None: ...


def prepare_sample(sample: object, specs: Sequence[FieldSpec], where: str,
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
    values: dict[str, object] = {}
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
            if record is None and isinstance(spec.kind, EncodedImage):
                data = source = _image_bytes(sample[spec.name], settings.max_file_size,
                                             settings.storage_options)
                record = prepare_data(data, settings.max_side, settings.quality,
                                      settings.apply_exif_orientation)
                if record.data is None:
                    raise BadValue(record.error or "not a decodable image")
                continue
            values[spec.name] = spec.kind.store(spec, sample[spec.name], store)
            if record is None and spec.name == records and isinstance(spec.kind, Clips):
                record = _kind_record(spec, spec.kind, values[spec.name])
        except BadValue as exc:
            # a listed file is the sample itself: its reason names the file, not a field
            field = "" if isinstance(sample[spec.name], ListedFile) else \
                f"field {spec.name!r} ({spec.describe()}): "
            return PreparedSample(_reject(f"{where}: {field}{exc}"), {}, path)
    assert record is not None  # check_specs: an image field is declared
    mismatch = _fit_record(specs, values, source, record)
    if mismatch is not None:
        return PreparedSample(_reject(f"{where}: {mismatch}"), {}, path)
    return PreparedSample(record, values, path)
