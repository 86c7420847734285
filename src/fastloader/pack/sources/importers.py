"""Which importer reads a source (detected from the path, or forced), and its options' checks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from fastloader.errors import PackError
from fastloader.format.remote import is_url
from fastloader.pack.sources.groups import is_tar_name

SOURCE_FORMATS = ("imagefolder", "csv", "tsv", "jsonl", "parquet", "files", "tar", "coco",
                  "audiofolder")
_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet",
             ".json": "coco"}


def detect(src: str | os.PathLike[str], forced: str | None) -> str:
    """The source kind of src: `forced` if given, else by suffix (a table, tar shards or a
    brace pattern of them); a folder by what it holds (folder_kind's rule: class folders
    of images, or file groups with sidecars; PackError when both readings fit)."""
    if forced is not None:
        if forced not in SOURCE_FORMATS:
            raise PackError(f"unknown source format {forced!r}; choose one of "
                            f"{', '.join(SOURCE_FORMATS)}.")
        return forced
    text = os.fspath(src)
    path = Path(text).expanduser()
    if is_tar_name(text):
        return "tar"
    if path.is_dir():
        from fastloader.pack.sources.audio_tree import is_clip_tree
        from fastloader.pack.sources.hf_parquet import is_parquet_folder

        if is_parquet_folder(path):  # one split's files, as the Hugging Face Hub keeps them
            return "parquet"
        kind = folder_kind(path)
        # class folders holding clips and no image: a Speech Commands style tree
        return "audiofolder" if kind == "imagefolder" and is_clip_tree(path) else kind
    suffix = path.suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    return "imagefolder"  # its scan says what is wrong (missing, a file...), as it always did


def _files(folder: Path) -> Iterator[PurePosixPath]:
    """Paths (relative to folder) of the non-hidden files under it, as the scan sees them."""
    for top, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = PurePosixPath(Path(top).relative_to(folder).as_posix())
        for name in sorted(names):
            if not name.startswith("."):
                yield base / name


def folder_kind(folder: Path, limit: int = 2000) -> str:
    """What a folder holds, from its first `limit` files: "tar" for tar shards alone, "files"
    for file groups (a name up to its first dot shared by an image and a sidecar: x.jpg
    beside x.cls, x.txt, x.json, x.npy ... or several images with no class folders), else
    "imagefolder" (class folders of images, whatever their names: frame.000.jpg, x.gif
    beside x.tif). Refuses, naming both readings, when class folders of images also carry
    sidecars: either reading is honest, and picking one silently packs the wrong one."""
    from fastloader.pack.sources.groups import split_key
    from fastloader.pack.sources.scan import IMAGE_EXTENSIONS

    keys: dict[str, list[str]] = {}
    tars = others = 0
    classes: dict[str, int] = {}
    for count, rel in enumerate(_files(folder)):
        if count >= limit:
            break
        if len(rel.parts) == 1 and is_tar_name(rel.name):
            tars += 1
            continue
        others += 1
        key, ext = split_key(rel.as_posix())
        keys.setdefault(key, []).append(ext)
        if len(rel.parts) > 1 and rel.suffix.lower() in IMAGE_EXTENSIONS:
            classes[rel.parts[0]] = classes.get(rel.parts[0], 0) + 1
    if tars and not others:
        return "tar"

    def is_image(ext: str) -> bool:
        return "." + ext.rpartition(".")[2] in IMAGE_EXTENSIONS

    paired = next((key for key, exts in keys.items() if any(map(is_image, exts))
                   and not all(map(is_image, exts))), None)
    if paired is not None and classes:
        first = sorted(classes)[0]
        raise PackError(
            f"{folder} can be read two ways: as an ImageFolder tree ({len(classes)} class "
            f"folders such as {first!r}; the folder is each image's label and the other "
            f"files are ignored) or as file groups (the files sharing a name up to its "
            f"first dot are one sample, e.g. {paired} with fields "
            f"{', '.join(sorted(keys[paired]))}); say which with "
            f'source_format="imagefolder" or source_format="files".')
    if paired is not None or (not classes and any(len(e) > 1 for e in keys.values())):
        return "files"
    return "imagefolder"


def refuse_table_options(kind: str, fields: Any, image: Any, label: Any, root: Any) -> None:
    """An ImageFolder tree takes none of the table and field options."""
    given = [f"{name}=" for name, value in (("fields", fields), ("image", image),
                                            ("label", label), ("root", root)) if value]
    if given:
        raise PackError(f"{', '.join(given)} do not apply to an ImageFolder tree (its classes "
                        'are its folders, its images the files); pass source_format="files" '
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
            from fastloader.pack.sources.groups import tar_files

            files = [Path(p) for p in tar_files(path)]
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
            raise PackError("fields=, image= and label= do not apply to a COCO file: its "
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
            raise PackError("image=, label= and root= are table options; file groups name "
                            "their fields by extension.")
        from fastloader.pack.sources.groups import open_groups

        return open_groups(src, kind, fields, storage_options)
    if kind == "audiofolder":
        from fastloader.pack.sources.audio_tree import open_audio_tree

        return open_audio_tree(src, fields, image, label, root)
    from fastloader.pack.sources.tables import open_table

    return open_table(src, kind, fields, image, label, root)
