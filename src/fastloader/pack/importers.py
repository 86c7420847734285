"""Which importer reads a source (detected from the path, or forced), and its options' checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastloader.errors import PackError

SOURCE_FORMATS = ("imagefolder", "csv", "tsv", "jsonl", "parquet", "files", "tar")
_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet",
             ".tar": "tar"}


def detect(src: str | os.PathLike[str], forced: str | None) -> str:
    """The source kind of src: `forced` if given, else by suffix (a table, a .tar or a brace
    pattern of them), and a folder is an ImageFolder tree when it has subfolders and no files
    beside them, else a folder of file groups (x.jpg, x.cls, ...)."""
    if forced is not None:
        if forced not in SOURCE_FORMATS:
            raise PackError(f"unknown source format {forced!r}; choose one of "
                            f"{', '.join(SOURCE_FORMATS)}.")
        return forced
    text = os.fspath(src)
    path = Path(text).expanduser()
    if ("{" in text and text.rstrip("}").endswith(".tar")) or text.endswith(".tar"):
        return "tar"
    if path.is_dir():
        entries = [e for e in path.iterdir() if not e.name.startswith(".")]
        has_files = any(e.is_file() for e in entries)
        return "files" if has_files else "imagefolder"
    suffix = path.suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if not path.exists():
        raise PackError(f"{src}: no such file or folder; pass an ImageFolder tree, a table "
                        "(.csv .tsv .jsonl .parquet), a folder of file groups or .tar shards.")
    raise PackError(f"{src}: cannot tell what kind of source this is from its suffix "
                    f"{suffix!r}; pass --source-format ({', '.join(SOURCE_FORMATS)}).")


def refuse_table_options(kind: str, fields: Any, image: Any, label: Any, root: Any,
                         skip_bad: bool) -> None:
    """An ImageFolder tree takes none of the table and field options."""
    given = [name for name, value in (("fields", fields), ("image", image), ("label", label),
                                      ("root", root), ("skip_bad", skip_bad)) if value]
    if given:
        raise PackError(f"{', '.join(given)} do not apply to an ImageFolder tree (its classes "
                        "are its folders; unreadable files are skipped and listed already); "
                        "pass --source-format files if it is a folder of file groups.")


def open_source(src: str | os.PathLike[str], kind: str, *, fields: Any, image: str | None,
                label: str | None, root: Any) -> tuple[Any, Any, dict[str, Any]]:
    """(samples, field specs, source description) of a table or of file groups."""
    if kind in ("files", "tar"):
        if image or label or root:
            raise PackError("--image, --label and --root are table options; file groups name "
                            "their fields by extension.")
        from fastloader.pack.groups import open_groups

        return open_groups(src, kind, fields)
    from fastloader.pack.tables import open_table

    return open_table(src, kind, fields, image, label, root)
