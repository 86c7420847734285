"""List an ImageFolder tree at a URL (s3://bucket/tree, any fsspec URL) once, on the driver.

One recursive listing (fs.find with details) gives every object's path and size; the rules are
scan.py's, so a tree packs into the same dataset from its URL as from a local copy: classes are
the sorted first path components, files sorted by folder then name, hidden entries (a name
starting with ".", a hidden folder counted once) and non-image names ignored and counted,
objects directly under the root counted as outside the classes, objects over max_file_size
refused (listed in skipped.json). An object's stamp (the plan's mtime, which --resume compares)
is derived from its ETag, else its modification time.
"""

from __future__ import annotations

import hashlib
import posixpath
from datetime import datetime
from typing import Any

from fastloader.errors import PackError
from fastloader.format.remote import Remote
from fastloader.pack.sources.listing import Listing, ListingBuilder
from fastloader.pack.sources.scan import IMAGE_EXTENSIONS, ScanResult
from fastloader.pack.sources.types import StorageOptions


def stamp(info: dict[str, Any]) -> int:
    """An int that changes when the object does: from its ETag, else its mtime (ns)."""
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    if etag:
        return int(hashlib.sha256(str(etag).encode()).hexdigest()[:15], 16)
    when = info.get("mtime") or info.get("LastModified") or info.get("updated") or 0
    if isinstance(when, datetime):
        return int(when.timestamp() * 1e9)
    try:
        return int(float(when) * 1e9)
    except (TypeError, ValueError):
        return 0


def _objects(remote: Remote) -> dict[str, dict[str, Any]]:
    remote.fs.invalidate_cache(remote.path)
    try:
        found = remote.fs.find(remote.path, detail=True)
    except FileNotFoundError:
        found = {}
    return {posixpath.relpath(path, remote.path): info for path, info in found.items()
            if info.get("type", "file") != "directory" and not path.endswith("/")}


_Kept = tuple[str, str, str, int, int]  # class, folder, name, size, stamp
_Refused = tuple[str, str, str, str, None]  # class, folder, name, reason


def _classify(objects: dict[str, dict[str, Any]], result: ScanResult, max_file_size: int
              ) -> tuple[set[str], list[_Kept], list[_Refused]]:
    """scan.py's rules on each object: the classes seen, the files kept (size, stamp) and the
    refused ones (reason); hidden, non-image and outside-class counts go into result."""
    hidden: set[tuple[str, ...]] = set()
    classes: set[str] = set()
    kept: list[_Kept] = []
    refused: list[_Refused] = []
    for relpath, info in objects.items():
        parts = relpath.split("/")
        if parts[0].startswith("."):
            hidden.add(tuple(parts[:1]))
            continue
        if len(parts) == 1:
            result.ignored_outside_classes += 1
            continue
        classes.add(parts[0])
        first = next((j for j, part in enumerate(parts) if part.startswith(".")), None)
        entry = (parts[0], posixpath.dirname(relpath), parts[-1])
        size = int(info.get("size") or 0)
        if first is not None:  # a hidden folder counts once, as the walk of a folder does
            hidden.add(tuple(parts[: first + 1]))
        elif posixpath.splitext(parts[-1])[1].lower() not in IMAGE_EXTENSIONS:
            result.ignored_non_image += 1
        elif size > max_file_size:
            refused.append((*entry, f"{size} bytes, over the --max-file-size cap of "
                            f"{max_file_size}", None))
        else:
            kept.append((*entry, size, stamp(info)))
    result.ignored_hidden = len(hidden)
    return classes, kept, refused


def scan_url(url: str, max_file_size: int, storage_options: StorageOptions | None = None
             ) -> ScanResult:
    """The ScanResult of the tree at url (result.root is the URL, without a trailing /)."""
    remote = Remote(url, storage_options)
    objects = _objects(remote)
    if not objects:
        raise PackError(f"source {remote.url} holds no objects (a wrong URL, or no access?); "
                        "pass the URL of the prefix that holds class folders.")
    result = ScanResult(root=remote.url, classes=[], files=Listing.from_files([]))
    classes, kept, refused = _classify(objects, result, max_file_size)
    result.classes = sorted(classes)
    label = {name: k for k, name in enumerate(result.classes)}

    def order(entry: _Kept | _Refused) -> tuple[int, str, str]:  # class, then folder, then name
        return label[entry[0]], entry[1], entry[2]

    builder = ListingBuilder()
    for name, folder, file, size, stamp in sorted(kept, key=order):
        builder.append(f"{folder}/{file}", label[name], size, stamp)
    result.files = builder.finish()
    used = {entry[0] for entry in kept}
    result.empty_classes = [name for name in result.classes if name not in used]
    result.refused = [[f"{folder}/{file}", why] for _, folder, file, why, _ in
                      sorted(refused, key=order)]  # in the walk's order, as scan.py's
    if not result.files:
        raise PackError(f"source {remote.url} holds no image files in class folders; expected "
                        "SRC/<class>/<image>.jpg (or .png, .webp, ...).")
    return result


__all__ = ["scan_url"]
