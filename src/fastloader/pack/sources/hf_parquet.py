"""Parquet files as one table (a file, a brace pattern of them such as
train-{00000..00041}-of-00042.parquet, or a folder of one split's files, in name order), with
each column's Hugging Face feature (the `huggingface` schema metadata `datasets` writes).

Image columns (a `datasets` Image() struct {bytes, path}, or a binary column) are not read
here: each cell is a ParquetCell (pack/sources/values.py), read by the pool worker that checks
it, one row group at a time, as a tar's members are. The other columns are
read here, as a CSV's cells are. pyarrow is imported only when a Parquet file is read.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from fastloader.errors import PackError
from fastloader.pack.sources.parquet_pages import value_ranges
from fastloader.pack.sources.types import Row
from fastloader.pack.sources.values import ParquetCell, pyarrow_parquet

_SHARD = re.compile(r"^(?P<split>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet$")


def parquet_files(src: str | os.PathLike[str]) -> list[Path]:
    """The files a Parquet source names (absolute, in order); PackError naming what is
    missing, or the splits a folder mixes."""
    text = os.fspath(src)
    path = Path(text).expanduser().absolute()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file()
                       and p.suffix.lower() == ".parquet" and not p.name.startswith("."))
        if not files:
            raise PackError(f"{path}: a folder with no .parquet files; pass a .parquet file, "
                            "a folder of one split's .parquet files or a brace pattern.")
        _check_split(path, files)
        return files
    from fastloader.pack.sources.groups import expand_braces

    files = [Path(p).expanduser().absolute() for p in expand_braces(text)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise PackError(f"{missing[0]}: no such table file ({len(missing)} of {len(files)} "
                        f"named by {text!r} are missing).")
    return files


def is_parquet_folder(path: Path) -> bool:
    """Whether a folder holds .parquet files and nothing else but hidden files (one split's
    files, as the Hugging Face Hub stores them)."""
    files = [p for p in path.iterdir() if not p.name.startswith(".")]
    return bool(files) and all(p.is_file() and p.suffix.lower() == ".parquet" for p in files)


def _check_split(folder: Path, files: list[Path]) -> None:
    """One split's shards, every one there (NAME-00000-of-00042.parquet ...)."""
    splits: dict[str, tuple[int, set[int]]] = {}
    for file in files:
        found = _SHARD.match(file.name)
        if found is None:
            continue
        count, seen = splits.setdefault(found["split"], (int(found["count"]), set()))
        seen.add(int(found["index"]))
    if len(splits) > 1:
        patterns = [f"{folder}/{name}-{{00000..{count - 1:05d}}}-of-{count:05d}.parquet"
                    for name, (count, _) in sorted(splits.items())]
        raise PackError(f"{folder} holds the .parquet files of {len(splits)} splits "
                        f"({', '.join(sorted(splits))}); pack one split at a time: "
                        f"{' or '.join(repr(p) for p in patterns)}.")
    for name, (count, seen) in splits.items():
        gone = sorted(set(range(count)) - seen)
        if gone:
            raise PackError(f"{folder}: split {name!r} has {count} files, and "
                            f"{name}-{gone[0]:05d}-of-{count:05d}.parquet is not there "
                            f"({len(gone)} missing); fetch it, or pass the files to pack as "
                            "a brace pattern.")


class ParquetTable(NamedTuple):
    """The files of a Parquet source, their columns, Hugging Face features (column ->
    feature JSON; {} without datasets' metadata) and which columns hold image bytes."""

    files: list[Path]
    header: list[str]
    features: dict[str, object]
    binary: frozenset[str]  # {bytes, path} struct or binary columns


def open_table(src: str | os.PathLike[str]) -> ParquetTable:
    """The table of a Parquet source (every file's schema read; they must agree)."""
    files = parquet_files(src)
    pq = pyarrow_parquet(files[0])
    schema = _schema(pq, files[0])
    for file in files[1:]:
        other = _schema(pq, file)
        if other.names != schema.names or other.types != schema.types:
            raise PackError(f"{file}: its columns ({', '.join(other.names)}) differ from "
                            f"{files[0].name}'s ({', '.join(schema.names)}); the files of one "
                            "table must have the same columns and types.")
    metadata = (schema.metadata or {}).get(b"huggingface")
    features: dict[str, object] = {}
    if metadata:
        try:
            features = dict(json.loads(metadata)["info"]["features"])
        except (ValueError, KeyError, TypeError) as exc:
            raise PackError(f"{files[0]}: its 'huggingface' schema metadata is not the "
                            f"features JSON datasets writes ({type(exc).__name__}: {exc}).") \
                from None
    binary = frozenset(name for name, kind in zip(schema.names, schema.types, strict=True)
                       if _holds_bytes(kind))
    return ParquetTable(files, list(schema.names), features, binary)


def _schema(pq: Any, file: Path) -> Any:
    try:
        return pq.read_schema(file)
    except Exception as exc:  # pyarrow's ArrowInvalid and OSError: not a Parquet file
        raise PackError(f"{file}: not a readable Parquet file ({type(exc).__name__}: "
                        f"{exc}).") from None


def _holds_bytes(kind: Any) -> bool:
    import pyarrow as pa  # type: ignore[import-not-found, import-untyped, unused-ignore]

    if pa.types.is_struct(kind):
        return kind.get_field_index("bytes") >= 0
    return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind))


def read_rows(table: ParquetTable, lazy: set[str], base: Path) -> list[tuple[str, Row]]:
    """(where, row dict) of every row of every file, in order: the lazy columns' cells as
    ParquetCells, the others' values as pyarrow gives them."""
    pq = pyarrow_parquet(table.files[0])
    rows: list[tuple[str, Row]] = []
    folder = str(base)  # one string for every cell (a split can have millions)
    for file in table.files:
        handle = pq.ParquetFile(file)
        try:
            values = handle.read(columns=[c for c in table.header if c not in lazy]).to_pylist()
        except Exception as exc:  # a damaged file: pyarrow's errors
            raise PackError(f"{file}: cannot be read ({type(exc).__name__}: {exc}).") from None
        info, name = file.stat(), str(file)
        stamp = (info.st_size, info.st_mtime_ns)
        k = 0
        leaves = {c: _bytes_leaf(handle.schema, c) for c in lazy}
        for group in range(handle.metadata.num_row_groups):
            meta = handle.metadata.row_group(group)
            sizes = {c: _column_bytes(meta, c) // max(1, meta.num_rows) for c in lazy}
            ranges = {c: value_ranges(name, handle.metadata, handle.schema, group, leaf)
                      for c, leaf in leaves.items()}
            for r in range(meta.num_rows):
                row = values[k]
                for column in lazy:
                    located = ranges[column]
                    at = located[r] if located is not None else None
                    row[column] = ParquetCell(name, group, r, column, folder, sizes[column],
                                              stamp, *(at or (-1, -1)))
                k += 1
                rows.append((f"{name} line {k}", row))
    return rows


def _bytes_leaf(schema: Any, column: str) -> int:
    """The leaf column holding an image column's bytes (a struct's `bytes` field, or the
    binary column itself)."""
    paths = [schema.column(j).path for j in range(len(schema))]
    return paths.index(f"{column}.bytes") if f"{column}.bytes" in paths else paths.index(column)


def _column_bytes(meta: Any, column: str) -> int:
    """A column's uncompressed bytes in a row group (the sum of its leaves)."""
    return sum(meta.column(j).total_uncompressed_size for j in range(meta.num_columns)
               if meta.column(j).path_in_schema.split(".")[0] == column)
