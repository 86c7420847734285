"""Table importer: .csv, .tsv, .jsonl (and .parquet with pyarrow), one row a sample.

The image column is found by name (path, image, file, filename) or given; its paths are
relative to the table's folder or `root`. `label` turns a column of class names into ids
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
from pathlib import Path
from typing import Any

from fastloader.errors import OptionalDependencyError, PackError
from fastloader.format.fields import FieldSpec, check_specs, make_spec
from fastloader.format.kinds.infer import infer_kind
from fastloader.pack.sources import spatial
from fastloader.pack.sources.values import ERROR_KEY, PATH_KEY, WHERE_KEY

IMAGE_COLUMNS = ("path", "image", "file", "filename")
AUDIO_COLUMNS = ("audio", "audio_filepath", "audio_path")  # NeMo manifests: audio_filepath
_EMPTY = None  # an empty cell, before the column's kind says what it reads as


def _csv_rows(path: Path, delimiter: str) -> tuple[list[str], list[tuple[int, Any]]]:
    """(header, [(line, row dict or an error string)])."""
    rows: list[tuple[int, Any]] = []
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


def _jsonl_rows(path: Path) -> tuple[list[str], list[tuple[int, Any]]]:
    header: dict[str, None] = {}
    rows: list[tuple[int, Any]] = []
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


def _parquet_rows(path: Path) -> tuple[list[str], list[tuple[int, Any]]]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found]
    except ImportError:
        raise OptionalDependencyError(f"{path}: reading .parquet needs pyarrow; "
                                      "pip install pyarrow, or export the table as CSV.") from None
    table = pq.read_table(path)
    return list(table.column_names), [(k + 1, row) for k, row in enumerate(table.to_pylist())]


def _infer(column: str, rows: list[tuple[int, Any]], from_csv: bool) -> str:
    return infer_kind([r[column] for _, r in rows
                       if isinstance(r, dict) and r.get(column) is not None], from_csv)


def _convert(spec: FieldSpec, value: Any, from_csv: bool) -> Any:
    """A cell as its field's value; ValueError saying why not."""
    if spec.is_array and (value is not None or spec.kind.holds_boxes or
                          spec.name in spatial.PER_BOX):  # JSON lists; empty: no boxes
        return spatial.cell_array(value, spec)
    return spec.kind.from_cell(spec, value, from_csv)


def _row_sample(line: int, row: Any, table: Path, specs: list[FieldSpec], columns: dict[str, str],
                base: Path, from_csv: bool) -> dict[str, Any]:
    where = f"{table} line {line}"
    if not isinstance(row, dict):
        return {WHERE_KEY: where, ERROR_KEY: row}
    sample: dict[str, Any] = {WHERE_KEY: where}
    for spec in specs:
        if columns[spec.name] not in row:  # JSONL: a key other records have (not a null)
            return {WHERE_KEY: where, ERROR_KEY: f"has no field {columns[spec.name]!r}, which "
                    "other records have (write null for an empty value)"}
        value = row.get(columns[spec.name])
        try:
            if spec.kind.cell_is_path and isinstance(value, dict):  # a {bytes, path} struct
                value = spec.kind.from_cell(spec, value, from_csv)  # (Hugging Face Audio())
            if spec.kind.cell_is_path and isinstance(value, bytes):
                pass  # the file's bytes themselves
            elif spec.kind.cell_is_path:  # an image's or a mask PNG's, relative to base
                if not isinstance(value, str) or not value:
                    raise ValueError(f"has no {spec.kind} path")
                if spec.kind.records and PATH_KEY not in sample:  # the records' source
                    sample[PATH_KEY] = value
                value = str(base / value)
            else:
                value = _convert(spec, value, from_csv)
        except ValueError as exc:
            return {WHERE_KEY: where, ERROR_KEY: f"field {spec.name!r} ({spec.kind}) "
                    f"{value!r:.40}: {exc}" if value is not None else
                    f"field {spec.name!r} ({spec.kind}) {exc}"}
        sample[spec.name] = value
    return sample


def _specs(table: Path, header: list[str], rows: list[tuple[int, Any]], image: str | None,
           label: str | None, overrides: dict[str, Any], from_csv: bool
           ) -> tuple[list[FieldSpec], dict[str, str]]:
    lowered = {h.lower(): h for h in header}
    image_col = image or next((lowered[c] for c in IMAGE_COLUMNS if c in lowered), None)
    clips = None if image else _audio_column(header, lowered, overrides)
    if clips is not None and (image_col is None or image_col == clips):
        image_col, overrides = None, {**overrides, clips: "audio"}  # a clip dataset
    elif image_col is None or image_col not in header:
        raise PackError(f"{table}: no image column (looked for {image or ', '.join(IMAGE_COLUMNS)}"
                        f" among {header}); name it with --image COL.")
    if label is not None and label not in header:
        raise PackError(f"{table}: no column {label!r} for --label among {header}.")
    columns = {"image": image_col} if image_col is not None else {}
    specs = [FieldSpec("image", "image")] if image_col is not None else []
    if label is not None:
        names = sorted({str(r[label]) for _, r in rows if isinstance(r, dict)
                        and r.get(label) is not None})
        specs.append(FieldSpec("label", "int", classes=tuple(names)))
        columns["label"] = label
    for column in header:
        if column in (image_col, label):
            continue
        kind = overrides[column] if column in overrides else (
            spatial.default_kind(column, header, spatial.declares_boxes(overrides))
            or _infer(column, rows, from_csv))
        specs.append(make_spec(column, kind, PackError, f"{table} column {column!r}"))
        columns[column] = column
    unknown = set(overrides) - set(header)
    if unknown:
        raise PackError(f"{table}: --field names {sorted(unknown)}, not columns of {header}.")
    specs = spatial.with_per_box(specs)
    check_specs(specs, PackError, str(table))
    return specs, columns


def _audio_column(header: list[str], lowered: dict[str, str], overrides: dict[str, Any]
                  ) -> str | None:
    """The column of clip paths: one declared of a records kind other than image (--field
    COL:audio), else one named like AUDIO_COLUMNS; None: not a clip table."""
    for column in header:
        if column in overrides:
            kind = make_spec(column, overrides[column], PackError, "--field").kind
            if kind.records and not kind.is_image:
                return column
    return next((lowered[c] for c in AUDIO_COLUMNS if c in lowered), None)


def open_table(path: str | os.PathLike[str], kind: str, fields: Any, image: str | None,
               label: str | None, root: str | os.PathLike[str] | None
               ) -> tuple[list[dict[str, Any]], list[FieldSpec], dict[str, Any]]:
    """(samples, fields, source description) of a table."""
    table = Path(path).expanduser().absolute()
    if not table.is_file():
        raise PackError(f"{table}: no such table file.")
    from_csv = kind in ("csv", "tsv")
    reader = {"csv": lambda p: _csv_rows(p, ","), "tsv": lambda p: _csv_rows(p, "\t"),
              "jsonl": _jsonl_rows, "parquet": _parquet_rows}[kind]
    header, rows = reader(table)
    specs, columns = _specs(table, header, rows, image, label, dict(fields or {}), from_csv)
    base = Path(root).expanduser().absolute() if root is not None else table.parent
    samples = [_row_sample(line, row, table, specs, columns, base, from_csv)
               for line, row in rows]
    return samples, specs, {"kind": kind, "path": str(table), "root": str(base)}
