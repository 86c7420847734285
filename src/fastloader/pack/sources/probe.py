"""What a source path looks like, worked out once and only as far as a detector asks: its
suffix, whether it is a folder, its first files, and what such a folder holds (folder_kind)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from fastloader.errors import PackError
from fastloader.pack.sources.groups import is_tar_name, split_key

LISTED = 2000  # a folder's first files that detection reads (the rest are never listed)


def listed_files(folder: Path) -> Iterator[PurePosixPath]:
    """Paths (relative to folder) of the non-hidden files under it, as the scan sees them."""
    for top, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = PurePosixPath(Path(top).relative_to(folder).as_posix())
        for name in sorted(names):
            if not name.startswith("."):
                yield base / name


class Probe:
    """A source path as detectors see it; each property is read (and listed) at most once."""

    def __init__(self, src: str | os.PathLike[str]) -> None:
        self.text = os.fspath(src)
        self.path = Path(self.text).expanduser()

    @functools.cached_property
    def is_dir(self) -> bool:
        return self.path.is_dir()

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower()

    @property
    def tar_name(self) -> bool:
        """Named like .tar shards (a .tar, .tar.gz ... or a brace pattern of them)."""
        return is_tar_name(self.text)

    @functools.cached_property
    def files(self) -> list[PurePosixPath]:
        """A folder's first LISTED files (relative paths, in walk order); [] for a file."""
        if not self.is_dir:
            return []
        found = []
        for count, rel in enumerate(listed_files(self.path)):
            if count >= LISTED:
                break
            found.append(rel)
        return found

    @functools.cached_property
    def folder(self) -> str | None:
        """folder_kind of a folder (None for a file); PackError when two readings fit."""
        return folder_kind(self.path, self.files) if self.is_dir else None


def folder_kind(folder: Path, files: list[PurePosixPath]) -> str:
    """What a folder holds, from its first files: "tar" for tar shards alone, "files" for file
    groups (a name up to its first dot shared by an image and a sidecar: x.jpg beside x.cls,
    x.txt, x.json, x.npy ... or several images with no class folders), else "imagefolder"
    (class folders of images, whatever their names: frame.000.jpg, x.gif beside x.tif).
    Refuses, naming both readings, when class folders of images also carry sidecars: either
    reading is honest, and picking one silently packs the wrong one."""
    from fastloader.pack.sources.scan import IMAGE_EXTENSIONS

    keys: dict[str, list[str]] = {}
    tars = others = 0
    classes: dict[str, int] = {}
    for rel in files:
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
