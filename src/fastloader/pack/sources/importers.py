"""Which importer reads a source (detected from the path, or forced), and its options' checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastloader.errors import PackError
from fastloader.format.remote import is_url

SOURCE_FORMATS = ("imagefolder", "csv", "tsv", "jsonl", "parquet", "files", "tar", "coco",
                  "audiofolder")
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
        from fastloader.pack.sources.audio_tree import is_clip_tree
        from fastloader.pack.sources.hf_parquet import is_parquet_folder

        if is_parquet_folder(path):  # one split's files, as the Hugging Face Hub keeps them
            return "parquet"
        if _has_groups(path):
            return "files"
        return "audiofolder" if is_clip_tree(path) else "imagefolder"
    suffix = path.suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    return "imagefolder"  # its scan says what is wrong (missing, a file...), as it always did


def _has_groups(folder: Path, limit: int = 2000) -> bool:
    """Whether files share a basename with a sidecar (x.jpg + x.cls/.txt/.json/.npy...): a
    WebDataset-style folder. Looks at the first `limit` files only (an ImageFolder tree can be
    huge, and a group folder shows its groups at once)."""
    from fastloader.pack.sources.groups import IMAGE_EXTENSIONS, split_key

    exts: dict[str, set[str]] = {}
    for count, file in enumerate(p for p in folder.rglob("*") if p.is_file()):
        if count >= limit:
            break
        key, ext = split_key(file.relative_to(folder).as_posix())
        exts.setdefault(key, set()).add(ext)
        if len(exts[key]) > 1 and not exts[key] <= set(IMAGE_EXTENSIONS):
            return True
    return False


def refuse_table_options(kind: str, fields: Any, image: Any, label: Any, root: Any) -> None:
    """An ImageFolder tree takes none of the table and field options."""
    given = [name for name, value in (("fields", fields), ("image", image), ("label", label),
                                      ("root", root)) if value]
    if given:
        raise PackError(f"{', '.join(given)} do not apply to an ImageFolder tree (its classes "
                        "are its folders, its images the files); pass --source-format files "
                        "if it is a folder of file groups.")


def fingerprint(kind: str, path: str, storage_options: dict[str, Any] | None = None) -> str:
    """sha256 of the source files' names, sizes and mtimes (tars at URLs: sizes and ETags, one
    request a tar): a resumed pack must read the same source (a table's image files are not
    included: check them with verify --decode)."""
    import hashlib
    import json

    if kind == "tar" and is_url(path):
        entries = _url_entries(path, storage_options)
    else:
        if kind == "tar":
            from fastloader.pack.sources.groups import expand_braces

            files = [Path(p) for p in expand_braces(path)]
        elif kind in ("files", "audiofolder"):
            files = sorted(p for p in Path(path).rglob("*") if p.is_file())
        elif kind == "parquet":  # a file, a brace pattern or a folder of one split's files
            from fastloader.pack.sources.hf_parquet import parquet_files

            files = parquet_files(path)
        else:
            files = [Path(path)]
        stats = [(str(f), f.stat()) for f in files]  # one stat a file
        entries = [[name, st.st_size, st.st_mtime_ns] for name, st in stats]
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def _url_entries(pattern: str, storage_options: dict[str, Any] | None) -> list[list[Any]]:
    """[url, size, stamp] of each tar a URL pattern names; PackError if one is gone."""
    from fastloader.pack.sources.groups import expand_braces
    from fastloader.pack.sources.scan_remote import stamp as _stamp
    from fastloader.pack.sources.tar_url import stat_tars

    urls = expand_braces(pattern)
    entries = []
    for url, info in zip(urls, stat_tars(urls, storage_options), strict=True):
        if info is None:
            raise PackError(f"{url}: no such tar shard (named by {pattern!r}).")
        entries.append([url, int(info.get("size") or 0), _stamp(info)])
    return entries


def open_source(src: str | os.PathLike[str], kind: str, *, fields: Any, image: str | None,
                label: str | None, root: Any, skip_empty: bool = False, masks: bool = False,
                storage_options: dict[str, Any] | None = None
                ) -> tuple[Any, Any, dict[str, Any]]:
    """(samples, field specs, source description with its fingerprint) of a table, of file
    groups or of a COCO file; storage_options: fsspec's, for .tar shards at URLs."""
    if kind == "coco":
        if fields or image or label:
            raise PackError("--field, --image and --label do not apply to a COCO file: its "
                            "fields are image, boxes, box_labels, iscrowd and image_id.")
        from fastloader.pack.sources.coco import open_coco

        samples, specs, source = open_coco(src, root, skip_empty, masks)
        return samples, specs, source | {"fingerprint": fingerprint(kind, source["path"])}
    samples, specs, source = _open(src, kind, fields=fields, image=image, label=label,
                                   root=root, storage_options=storage_options)
    return samples, specs, source | {"fingerprint": fingerprint(kind, source["path"],
                                                                storage_options)}


def reopen_description(src: str | os.PathLike[str], kind: str, *, fields: Any,
                       image: str | None, label: str | None, root: Any, skip_empty: bool,
                       masks: bool) -> dict[str, Any] | None:
    """How a shard task (a Ray task, `packdata shard`) opens this source again: JSON of
    open_source's arguments with absolute paths; None when fields cannot be written as JSON
    (then the samples travel to the tasks pickled). A URL stays as given; storage_options are
    never written here (a task on another node reads credentials from its environment)."""
    import json

    text = os.fspath(src)
    description = {"src": text if is_url(text) else os.path.abspath(os.path.expanduser(text)),
                   "kind": kind,
                   "fields": fields, "image": image, "label": label,
                   "root": None if root is None else os.path.abspath(
                       os.path.expanduser(os.fspath(root))),
                   "skip_empty": skip_empty, "masks": masks}
    try:
        return json.loads(json.dumps(description))  # tuples read back as lists, as stored
    except (TypeError, ValueError):
        return None


def _open(src: str | os.PathLike[str], kind: str, *, fields: Any, image: str | None,
          label: str | None, root: Any, storage_options: dict[str, Any] | None
          ) -> tuple[Any, Any, dict[str, Any]]:
    if kind in ("files", "tar"):
        if image or label or root:
            raise PackError("--image, --label and --root are table options; file groups name "
                            "their fields by extension.")
        from fastloader.pack.sources.groups import open_groups

        return open_groups(src, kind, fields, storage_options)
    if kind == "audiofolder":
        from fastloader.pack.sources.audio_tree import open_audio_tree

        return open_audio_tree(src, fields, image, label, root)
    from fastloader.pack.sources.tables import open_table

    return open_table(src, kind, fields, image, label, root)
