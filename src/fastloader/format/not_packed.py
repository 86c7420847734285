"""What a folder given as a packed dataset holds when it is none (an image tree, audio clips,
videos, tables, .tar shards): the error then says so and how to pack it elsewhere, not "pack
it again" into the source itself."""

from __future__ import annotations

import os
from pathlib import Path

from fastloader.decode.audio import AUDIO_EXTENSIONS
from fastloader.decode.pillow import IMAGE_EXTENSIONS
from fastloader.decode.video import VIDEO_EXTENSIONS

# a folder's files by what pack() reads them as (pack/sources/scan.py, importers.py, groups.py)
_TABLES = {".csv", ".tsv", ".jsonl", ".parquet"}
_TARS = {".tar", ".tgz"}
_WHAT = {"images": "an image tree (folders of image files)",
         "clips": "a folder of audio clips",
         "videos": "a folder of videos",
         "tables": "a folder holding a table",
         "tars": "a folder of .tar shards (WebDataset)"}
_LOOKED_AT = 2000  # files looked at, at most: a guess, not a listing of a huge tree


def _kind(name: str) -> str | None:
    suffix = os.path.splitext(name.lower())[1]
    if suffix in IMAGE_EXTENSIONS:
        return "images"
    if suffix in AUDIO_EXTENSIONS:
        return "clips"
    if suffix in VIDEO_EXTENSIONS:
        return "videos"
    if suffix in _TABLES:
        return "tables"
    return "tars" if suffix in _TARS or name.lower().endswith(".tar.gz") else None


def _seen(root: Path) -> dict[str, int]:
    """How many of (at most _LOOKED_AT of) root's files are of each kind."""
    counts: dict[str, int] = {}
    looked = 0
    for _, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in sorted(files):
            kind = _kind(name)
            if kind is not None:
                counts[kind] = counts.get(kind, 0) + 1
            looked += 1
            if looked >= _LOOKED_AT:
                return counts
    return counts


def _what(root: Path) -> tuple[str, Path] | None:
    """root's kind and the SRC that packs it: a table beside its files names them (the table
    is SRC), else the kind most of its files are (the folder is SRC)."""
    tables = sorted(p for p in root.iterdir() if p.is_file() and _kind(p.name) == "tables")
    if tables:
        return "tables", tables[0]
    counts = _seen(root)
    return (max(counts, key=lambda k: counts[k]), root) if counts else None


def source_advice(root: Path) -> str | None:
    """For a folder that is not a packed dataset: what it holds and how to pack it elsewhere,
    in Python's words (`fastloader.pack("SRC", "DST")`: packdata's error words turn it into
    `packdata SRC DST`); None when it holds nothing pack() reads."""
    try:
        seen = _what(root)
    except OSError:
        return None
    if seen is None:
        return None
    kind, src = seen
    dst = root.with_name(f"{root.name}.lmdb")
    return (f"{root} is {_WHAT[kind]}, not a packed dataset: pack it into one first, e.g. "
            f'`fastloader.pack("{src}", "{dst}")`, and use that')
