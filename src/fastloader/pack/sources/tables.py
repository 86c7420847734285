"""Table importer: .csv, .tsv, .jsonl (and .parquet with pyarrow), one row a sample.

The image column is found by name (path, image, file, filename) or given (Parquet: else the
first Image feature or column of image bytes); its paths are relative to the table's folder or
`root`; Parquet's image bytes ({bytes, path} structs of `datasets` Image() columns, or binary
cells) are read by the workers (pack/sources/hf_parquet.py), a struct's path only where it has
no bytes. A Parquet source may be one split's files (a brace pattern, or a folder); its columns'
Hugging Face features give their kinds (pack/sources/hf_features.py: ClassLabel names become
the label's classes). `label` turns a column of class names into ids
(sorted names). Other columns become fields of their inferred kind: CSV cells that all parse as
ints are int, as numbers float, else text; JSON values keep their type (lists and objects are
json). Empty cells: "" in text, NaN in float, null in json; in an int column an error (declare
the column float to read them as NaN). A row that cannot be read becomes a bad sample naming
the file, the line and the field, so skip_bad lists it and the rest is packed.
Columns named boxes, box_labels, iscrowd and mask are boxes (JSON), their per-box fields and a
mask PNG path (pack/sources/spatial.py).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec, check_specs, make_spec
from fastloader.format.kinds import Clips, HoldsBoxes, encoded_kinds, is_records
from fastloader.format.kinds.infer import infer_kind
from fastloader.pack.sources import hf_parquet, spatial
from fastloader.pack.sources.hf_features import Mapped, fields_of, is_image, kind_of, one_label
from fastloader.pack.sources.types import Description, FieldKinds, Row, Sample
from fastloader.pack.sources.values import ERROR_KEY, PATH_KEY, WHERE_KEY, ParquetCell

IMAGE_COLUMNS = ("path", "image", "file", "filename")
_SNIFFED = 16  # a column names clips when its first cells are all clip file names
_EMPTY = None  # an empty cell, before the column's kind says what it reads as


def media() -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """A table's clips, by kind: the columns named for them and their file names, as each
    registered kind of encoded files declares them. Their field is the kind's name (`audio`,
    `video`) whatever their column is called."""
    return {kind.name: (kind.columns, kind.extensions) for kind in encoded_kinds()}


def _csv_rows(path: Path, delimiter: str) -> tuple[list[str], list[tuple[int, Row]]]:
    """(header, [(line, row dict or an error string)])."""
    rows: list[tuple[int, Row]] = []
    with open(path, newline="", encoding="utf-8", errors="strict") as handle:
        reader = csv.reader(handle, delimiter=delimiter, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            raise PackError(f"{path} is empty; a table needs a header row.") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise PackError(f"{path} line 1: unreadable header ({exc}).") from None
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                break
            except (csv.Error, UnicodeDecodeError) as exc:
                rows.append((reader.line_num, f"malformed line ({exc})"))
                break  # the reader cannot resync after a broken quote
            if not cells:
                continue
            if len(cells) != len(header):
                rows.append((reader.line_num, f"malformed line: {len(cells)} cells, the header "
                                              f"has {len(header)}"))
                continue
            rows.append((reader.line_num, {k: (v if v != "" else _EMPTY)
                                           for k, v in zip(header, cells, strict=True)}))
    return header, rows


def _jsonl_rows(path: Path) -> tuple[list[str], list[tuple[int, Row]]]:
    header: dict[str, None] = {}
    rows: list[tuple[int, Row]] = []
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as exc:
                rows.append((line_no, f"malformed JSON record ({exc})"))
                continue
            if not isinstance(record, dict):
                rows.append((line_no, f"a JSON {type(record).__name__}, not an object"))
                continue
            header.update(dict.fromkeys(record))
            rows.append((line_no, record))
    return list(header), rows


def _infer(column: str, rows: list[tuple[str, Row]], from_csv: bool) -> str:
    return infer_kind([r[column] for _, r in rows
                       if isinstance(r, dict) and r.get(column) is not None], from_csv)


def _convert(spec: FieldSpec, value: object, from_csv: bool) -> object:
    """A cell as its field's value; ValueError saying why not."""
    if spec.is_array and (value is not None or isinstance(spec.kind, HoldsBoxes) or
                          spec.name in spatial.PER_BOX):  # JSON lists; empty: no boxes
        return spatial.cell_array(value, spec)
    return spec.kind.from_cell(spec, value, from_csv)


def shown(value: object) -> str:
    """A cell for an error message, never cut mid-value: short text and numbers as they are,
    bytes, structs and long values by what they are."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"({len(value)} bytes)"
    if isinstance(value, dict):
        return f"(a struct of {', '.join(map(str, value))})"
    text = repr(value)
    if isinstance(value, (str, int, float)) and len(text) <= 60:
        return text
    return f"(a {type(value).__name__}{f' of {len(value)}' if hasattr(value, '__len__') else ''})"


@dataclass(frozen=True)
class _Reading:
    """How a table's rows become samples: each field's column, the folder image paths are
    under, whether cells are CSV text, and the Hugging Face features' converters (by field)."""

    columns: dict[str, str]
    base: Path
    from_csv: bool
    converters: dict[str, Callable[[object], object]]

    def value(self, spec: FieldSpec, cell: object, sample: Sample) -> object:
        """A cell as its field's value (an image's source: bytes, a path under base, or a
        ParquetCell the worker reads); ValueError saying why not."""
        if isinstance(cell, ParquetCell):
            return cell
        if spec.name in self.converters:
            value = self.converters[spec.name](cell)
            if not (spec.kind.cell_is_path and isinstance(value, str)):
                return value
            cell = value  # a struct's path: under base, as a path cell's
        elif not spec.kind.cell_is_path:
            return _convert(spec, cell, self.from_csv)
        if isinstance(cell, (bytes, bytearray)) and is_records(spec.kind):  # the file's bytes
            return bytes(cell)
        if not isinstance(cell, str) or not cell:  # an image's or a mask PNG's path
            raise ValueError(f"has no {spec.kind} path")
        if is_records(spec.kind):  # the records' source path
            sample.setdefault(PATH_KEY, cell)
        return str(self.base / cell)


def _row_sample(where: str, row: Row, specs: list[FieldSpec], reading: _Reading
                ) -> Sample:
    if not isinstance(row, dict):
        return {WHERE_KEY: where, ERROR_KEY: row}
    sample: Sample = {WHERE_KEY: where}
    for spec in specs:
        column = reading.columns[spec.name]
        if column not in row:  # JSONL: a key other records have (not a null)
            return {WHERE_KEY: where, ERROR_KEY: f"has no field {column!r}, which other "
                    "records have (write null for an empty value)"}
        value = row.get(column)
        try:
            sample[spec.name] = reading.value(spec, value, sample)
        except ValueError as exc:
            named = f"field {spec.name!r}" + (f" (column {column!r})" if column != spec.name
                                               else "")
            return {WHERE_KEY: where, ERROR_KEY: f"{named} ({spec.kind}) {shown(value)}: {exc}"
                    if value is not None else f"{named} ({spec.kind}) {exc}"}
    return sample


def _image_column(where: str, header: list[str], image: str | None,
                  features: dict[str, Mapped], binary: frozenset[str],
                  overrides: dict[str, object], rows: list[tuple[str, Row]]
                  ) -> tuple[str | None, dict[str, object], str | None]:
    """(the records' image column, overrides, the clip column): the image column given, else
    by name, else the first Image feature or column of image bytes ({bytes, path} structs);
    None (with the clip column declared audio or video in the overrides) for a table of
    clips."""
    lowered = {h.lower(): h for h in header}
    found = image or next((lowered[c] for c in IMAGE_COLUMNS if c in lowered), None) or next(
        (c for c in header if c in features and features[c].image), None) or next(
        (c for c in header if c in binary), None)
    clips = None if image else _clip_column(header, lowered, overrides, features) or \
        _sniffed_column(rows, ([found] if found in header else []) + header, overrides, features)
    if clips is not None and (found is None or found == clips[0] or found not in header):
        # a clip dataset: its clips are the records
        column, medium = clips
        return None, {**overrides, column: overrides.get(column, medium)}, column
    if found is None or found not in header:
        raise PackError(f"{where}: no image column (looked for {image or ', '.join(IMAGE_COLUMNS)}"
                        f" among {header}); name it with image='COL'.")
    return found, overrides, None


def _sniffed_column(rows: list[tuple[str, Row]], columns: list[str], overrides: dict[str, object],
                    features: dict[str, Mapped]) -> tuple[str, str] | None:
    """(the first undeclared column of clip file names, their kind), or None."""
    for column in columns:
        if column not in overrides and column not in features:
            medium = _names_clips(rows, column)
            if medium is not None:
                return column, medium
    return None


def _names_clips(rows: list[tuple[str, Row]], column: str) -> str | None:
    """The kind ("audio", "video") whose file names (.wav, .flac ...; .mp4, .webm ...) a
    column's first cells all are, as class folders tell clips by their files; else None."""
    cells = [r[column] for _, r in rows[:4 * _SNIFFED]
             if isinstance(r, dict) and r.get(column) is not None][:_SNIFFED]
    suffixes = {PurePosixPath(c).suffix.lower() if isinstance(c, str) else "" for c in cells}
    return next((kind for kind, (_, extensions) in media().items()
                 if suffixes and suffixes <= set(extensions)), None)


def _label_spec(where: str, label: str, rows: list[tuple[str, Row]],
                features: dict[str, Mapped]) -> tuple[FieldSpec, Callable[[object], object] | None]:
    """--label's field: a ClassLabel's names (and ids), else the column's sorted names."""
    mapped = features.get(label)
    kind = kind_of(mapped.spec) if mapped is not None else None
    if mapped is not None and kind is not None and kind.takes_classes:
        return make_spec("label", mapped.spec, PackError, f"{where} column {label!r}"), \
            mapped.convert
    names = sorted({str(r[label]) for _, r in rows if isinstance(r, dict)
                    and r.get(label) is not None})
    return FieldSpec("label", "int", classes=tuple(names)), None


def _specs(where: str, header: list[str], rows: list[tuple[str, Row]], image_col: str | None,
           label: str | None, overrides: dict[str, object], from_csv: bool,
           features: dict[str, Mapped], clips: str | None = None
           ) -> tuple[list[FieldSpec], dict[str, str], dict[str, Callable[[object], object]]]:
    """(fields, field -> column, field -> converter): a column's kind is its --field, else
    its Hugging Face feature's, else a boxes/mask column's by name, else inferred. The clip
    column's field is its kind's name (`audio`, `video`) unless another column has that
    name."""
    if label is not None and label not in header:
        raise PackError(f"{where}: no column {label!r} for label= among {header}.")
    _check_overrides(where, header, image_col, label, overrides)
    columns = {"image": image_col} if image_col is not None else {}
    specs = [FieldSpec("image", "image")] if image_col is not None else []
    converters = {"image": features[image_col].convert} if image_col in features else {}
    if label is not None:
        spec, convert = _label_spec(where, label, rows, features)
        specs.append(spec)
        columns["label"] = label
        if convert is not None:
            converters["label"] = convert
    for column in header:
        if column in (image_col, label):
            continue
        kind = overrides[column] if column in overrides else (
            features[column].spec if column in features else
            spatial.default_kind(column, header, spatial.declares_boxes(overrides))
            or _infer(column, rows, from_csv))
        found = kind_of(kind) if column == clips else None
        medium = found.name if found is not None else None
        name = medium if medium is not None and (
            column == medium or medium not in header) else column
        specs.append(make_spec(name, kind, PackError, f"{where} column {column!r}"))
        columns[name] = column
        if column in features:
            converters[name] = features[column].convert
    specs = spatial.with_per_box(specs)
    one_label(where, [columns[s.name] for s in specs if s.classes is not None])
    check_specs(specs, PackError, where)
    return specs, columns, converters


def _check_overrides(where: str, header: list[str], image_col: str | None, label: str | None,
                     overrides: dict[str, object]) -> None:
    """--field names columns, and keeps the image column an image and the label a label."""
    unknown = set(overrides) - set(header)
    if unknown:
        raise PackError(f"{where}: fields= names {sorted(unknown)}, not columns of {header}.")
    if image_col is not None and image_col in overrides and not is_image(overrides[image_col]):
        raise PackError(f"{where}: fields={{{image_col!r}: ...}} declares the image column "
                        f"{image_col!r} another kind; it holds the records, read as image "
                        "bytes ({bytes, path} structs or binary cells) or image paths, so its "
                        "kind is image: drop it from fields=, or pick another image column "
                        "with image='COL'.")
    if label is not None and label in overrides:
        raise PackError(f"{where}: fields={{{label!r}: ...}} and label={label!r} both "
                        f"declare column {label!r}; label= makes it the int label of its class "
                        "names: pass one of them.")


def _clip_column(header: list[str], lowered: dict[str, str], overrides: dict[str, object],
                 features: dict[str, Mapped]) -> tuple[str, str] | None:
    """(the column of clips, its kind): one declared of a records kind other than image
    (--field COL:audio, COL:video), else a Hugging Face Audio() or Video() feature's, else
    one named like media()'s columns (audio_filepath, video_path ...); None: not a clip table."""
    for column in header:
        spec = overrides.get(column, features[column].spec if column in features else None)
        if spec is not None:
            kind = make_spec(column, spec, PackError, "fields=").kind
            if isinstance(kind, Clips):
                return column, kind.name
    return next(((lowered[c], kind) for kind, (columns, _) in media().items()
                 for c in columns if c in lowered), None)


def open_table(path: str | os.PathLike[str], kind: str, fields: FieldKinds | None,
               image: str | None, label: str | None, root: str | os.PathLike[str] | None
               ) -> tuple[list[Sample], list[FieldSpec], Description]:
    """(samples, fields, source description) of a table."""
    if kind == "parquet":
        return _open_parquet(path, fields, image, label, root)
    table = Path(path).expanduser().absolute()
    if not table.is_file():
        raise PackError(f"{table}: no such table file.")
    from_csv = kind in ("csv", "tsv")
    reader = {"csv": lambda p: _csv_rows(p, ","), "tsv": lambda p: _csv_rows(p, "\t"),
              "jsonl": _jsonl_rows}[kind]
    header, lines = reader(table)
    rows = [(f"{table} line {line}", row) for line, row in lines]
    base = Path(root).expanduser().absolute() if root is not None else table.parent
    samples, specs = table_samples(str(table), header, rows, fields, image, label, base,
                                   from_csv)
    return samples, specs, {"kind": kind, "path": str(table), "root": str(base)}


def table_samples(where: str, header: list[str], rows: list[tuple[str, Row]],
                  fields: FieldKinds | None, image: str | None, label: str | None, base: Path,
                  from_csv: bool
                  ) -> tuple[list[Sample], list[FieldSpec]]:
    """(samples, fields) of a table's rows ([(where, row dict or an error string)]), its
    media paths under base: a table importer's reading, for every table-shaped source."""
    image_col, overrides, clips = _image_column(where, header, image, {}, frozenset(),
                                                dict(fields or {}), rows)
    specs, columns, _ = _specs(where, header, rows, image_col, label, overrides, from_csv,
                               {}, clips)
    reading = _Reading(columns, base, from_csv, {})
    return [_row_sample(w, row, specs, reading) for w, row in rows], specs


def _open_parquet(path: str | os.PathLike[str], fields: FieldKinds | None, image: str | None,
                  label: str | None, root: str | os.PathLike[str] | None
                  ) -> tuple[list[Sample], list[FieldSpec], Description]:
    """A Parquet file, brace pattern or folder of one split's files: its Hugging Face
    features' kinds (with --field over them), image cells read by the workers."""
    table = hf_parquet.open_table(path)
    source = Path(path).expanduser().absolute()
    where = str(source)
    overrides = dict(fields or {})
    known = {c: f for c, f in table.features.items() if c in table.header}
    features = fields_of(known, where, {c: k for c, k in overrides.items() if c in known})
    try:  # the image bytes columns to leave to the workers (a clip column is found below)
        image_col, declared_kinds, _ = _image_column(where, table.header, image, features,
                                                     table.binary, overrides, [])
    except PackError:
        image_col, declared_kinds = None, overrides
    declared = {c for c, k in declared_kinds.items() if is_image(k)}
    images = ({image_col} if image_col is not None else set()) | {
        c for c, m in features.items() if m.image} | declared
    base = Path(root).expanduser().absolute() if root is not None else (
        source if source.is_dir() else table.files[0].parent)
    rows = hf_parquet.read_rows(table, images & table.binary, base)
    # again with the rows: a column of clip file names is the clips, whatever its name
    image_col, overrides, clips = _image_column(where, table.header, image, features,
                                                table.binary, overrides, rows)
    specs, columns, converters = _specs(where, table.header, rows, image_col, label,
                                        overrides, False, features, clips)
    reading = _Reading(columns, base, False, converters)
    samples = [_row_sample(w, row, specs, reading) for w, row in rows]
    return samples, specs, {"kind": "parquet", "path": where, "root": str(base)}
