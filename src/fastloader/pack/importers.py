"""Which importer reads a source (detected from the path, or forced), and its options' checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastloader.errors import PackError

SOURCE_FORMATS = ("imagefolder", "csv", "tsv", "jsonl", "parquet", "files", "tar", "coco")
_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet",
             ".tar": "tar", ".json": "coco"}


def detect(src: str | os.PathLike[str], forced: str | None) -> str:
    """The source kind of src: `forced` if given, else by suffix (a table, a .tar or a brace
    pattern of them); a folder is a folder of file groups when files share a basename with a
    sidecar (x.jpg beside x.cls, x.txt, ...), else an ImageFolder tree."""
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
        return "files" if _has_groups(path) else "imagefolder"
    suffix = path.suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    return "imagefolder"  # its scan says what is wrong (missing, a file...), as it always did


def _has_groups(folder: Path, limit: int = 2000) -> bool:
    """Whether files share a basename with a sidecar (x.jpg + x.cls/.txt/.json/.npy...): a
    WebDataset-style folder. Looks at the first `limit` files only (an ImageFolder tree can be
    huge, and a group folder shows its groups at once)."""
    from fastloader.pack.groups import IMAGE_EXTENSIONS, split_key

    exts: dict[str, set[str]] = {}
    for count, file in enumerate(p for p in folder.rglob("*") if p.is_file()):
        if count >= limit:
            break
        key, ext = split_key(file.relative_to(folder).as_posix())
        exts.setdefault(key, set()).add(ext)
        if len(exts[key]) > 1 and not exts[key] <= set(IMAGE_EXTENSIONS):
            return True
    return False


def refuse_table_options(kind: str, fields: Any, image: Any, label: Any, root: Any,
                         skip_bad: bool) -> None:
    """An ImageFolder tree takes none of the table and field options."""
    given = [name for name, value in (("fields", fields), ("image", image), ("label", label),
                                      ("root", root), ("skip_bad", skip_bad)) if value]
    if given:
        raise PackError(f"{', '.join(given)} do not apply to an ImageFolder tree (its classes "
                        "are its folders; unreadable files are skipped and listed already); "
                        "pass --source-format files if it is a folder of file groups.")


def fingerprint(kind: str, path: str) -> str:
    """sha256 of the source files' names, sizes and mtimes: a resumed pack must read the same
    source (a table's image files are not included: check them with verify --decode)."""
    import hashlib
    import json

    if kind == "tar":
        from fastloader.pack.groups import expand_braces

        files = [Path(p) for p in expand_braces(path)]
    elif kind == "files":
        files = sorted(p for p in Path(path).rglob("*") if p.is_file())
    else:
        files = [Path(path)]
    entries = [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def open_source(src: str | os.PathLike[str], kind: str, *, fields: Any, image: str | None,
                label: str | None, root: Any, skip_empty: bool = False, masks: bool = False
                ) -> tuple[Any, Any, dict[str, Any]]:
    """(samples, field specs, source description with its fingerprint) of a table, of file
    groups or of a COCO file."""
    if kind == "coco":
        if fields or image or label:
            raise PackError("--field, --image and --label do not apply to a COCO file: its "
                            "fields are image, boxes, box_labels, iscrowd and image_id.")
        from fastloader.pack.coco import open_coco

        samples, specs, source = open_coco(src, root, skip_empty, masks)
        return samples, specs, source | {"fingerprint": fingerprint(kind, source["path"])}
    samples, specs, source = _open(src, kind, fields=fields, image=image, label=label,
                                   root=root)
    return samples, specs, source | {"fingerprint": fingerprint(kind, source["path"])}


def reopen_description(src: str | os.PathLike[str], kind: str, *, fields: Any,
                       image: str | None, label: str | None, root: Any, skip_empty: bool,
                       masks: bool) -> dict[str, Any] | None:
    """How a shard task (a Ray task, `packdata shard`) opens this source again: JSON of
    open_source's arguments with absolute paths; None when fields cannot be written as JSON
    (then the samples travel to the tasks pickled)."""
    import json

    description = {"src": os.path.abspath(os.path.expanduser(os.fspath(src))), "kind": kind,
                   "fields": fields, "image": image, "label": label,
                   "root": None if root is None else os.path.abspath(
                       os.path.expanduser(os.fspath(root))),
                   "skip_empty": skip_empty, "masks": masks}
    try:
        return json.loads(json.dumps(description))  # tuples read back as lists, as stored
    except (TypeError, ValueError):
        return None


def _open(src: str | os.PathLike[str], kind: str, *, fields: Any, image: str | None,
          label: str | None, root: Any) -> tuple[Any, Any, dict[str, Any]]:
    if kind in ("files", "tar"):
        if image or label or root:
            raise PackError("--image, --label and --root are table options; file groups name "
                            "their fields by extension.")
        from fastloader.pack.groups import open_groups

        return open_groups(src, kind, fields)
    from fastloader.pack.tables import open_table

    return open_table(src, kind, fields, image, label, root)
