"""Walk an ImageFolder-style tree: sorted class folders, image files found recursively.

The files found go into a pack/listing.Listing (compact arrays, no object per file): see
that module for the interface the packer and shard planners read it through. Only one
class folder's file names (all its sub-folders') are held as Python strings at a time, while
they are sorted.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from fastloader.decode.pillow import IMAGE_EXTENSIONS
from fastloader.errors import PackError
from fastloader.pack.sources.listing import Listing, ListingBuilder, SourceFile
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE

PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096



@dataclass
class ScanResult:
    """What scan() found under SRC: `files` is the sorted Listing of the files to pack."""

    root: Path | str  # a str: the URL of a tree in object storage (scan_remote.py)
    classes: list[str]
    files: Listing
    ignored_hidden: int = 0
    ignored_non_image: int = 0
    ignored_outside_classes: int = 0
    empty_classes: list[str] = field(default_factory=list)
    refused: list[list[str]] = field(default_factory=list)  # [relpath, reason]: skipped.json

    @property
    def total_bytes(self) -> int:
        return self.files.total_bytes

    def bad_data(self) -> list[list[str]]:
        """The refusals of data that is not packed (an unreadable or special file, one over
        --max-file-size, ...): a pack stops at the first unless --skip-bad. A folder link
        whose folder is packed anyway (in its own place, or once) is listed only."""
        return [entry for entry in self.refused if entry[1] not in NOT_DATA]


LINK_INSIDE = "symlink to a folder inside SRC (packed in its own place once, not again " \
    "through the link)"
VISITED = "folder already visited (a symlink loop or a second link)"
NOT_DATA = frozenset((LINK_INSIDE, VISITED))  # refusals whose files are packed all the same


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


class _Walker:
    """Walks class folders so each real folder is visited once and only regular files count.

    A folder symlink is followed only when its target lies outside SRC (inside, the target is
    packed in its own place: following would pack it twice, under another label, or loop) and
    was not visited already (a loop outside SRC). Nothing is read: sizes come from stat.
    """

    def __init__(self, root: Path, result: ScanResult, max_file_size: int) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self.result = result
        self.files = ListingBuilder()
        self.max_file_size = max_file_size
        self.visited: set[tuple[int, int]] = set()

    def refuse(self, path: str, reason: str) -> None:
        folder = "/" if path.endswith("/") else ""  # relpath drops it; it marks a folder
        self.result.refused.append([os.path.relpath(path, self.root) + folder, reason])

    def _inside_src(self, path: str) -> bool:
        real = os.path.realpath(path)
        return os.path.commonpath([self.real_root, real]) == self.real_root

    def enter(self, path: str, linked: bool) -> bool:
        """Whether to walk the folder at path (refusals are listed)."""
        if len(os.fsencode(path)) >= PATH_MAX:
            self.refuse(path + "/", f"folder path is over PATH_MAX ({PATH_MAX} bytes): the "
                        "files below it cannot be opened; move them to a shorter path")
            return False
        if linked and self._inside_src(path):
            self.refuse(path + "/", LINK_INSIDE)
            return False
        try:
            info = os.stat(path)
        except OSError as exc:
            self.refuse(path + "/", f"cannot read folder: {exc.strerror}")
            return False
        key = (info.st_dev, info.st_ino)
        if key in self.visited:
            self.refuse(path + "/", VISITED)
            return False
        self.visited.add(key)
        return True

    def walk(self, top: str) -> list[tuple[str, list[str]]]:
        """(folder, image file names) of every folder under top, top included."""
        found = []
        stack = [top]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError as exc:
                self.refuse(folder + "/", f"cannot read folder: {exc.strerror}")
                continue
            files = []
            for entry in entries:
                if _is_hidden(entry.name):
                    self.result.ignored_hidden += 1
                elif _is_dir(entry):
                    if self.enter(entry.path, entry.is_symlink()):
                        stack.append(entry.path)
                elif os.path.splitext(entry.name)[1].lower() not in IMAGE_EXTENSIONS:
                    self.result.ignored_non_image += 1
                else:
                    files.append(entry.name)  # a name, not the DirEntry: a third the memory
            found.append((folder, files))
        return found

    def add(self, folder: str, prefix: bytes, name: str, label: int) -> bool:
        """List the image-named file folder/name (prefix: its folder relative to SRC, as
        bytes ending in '/'); False, and a refusal, if it cannot be packed."""
        path = os.path.join(folder, name)
        if len(os.fsencode(path)) >= PATH_MAX:
            self.refuse(path, f"path is over PATH_MAX ({PATH_MAX} bytes)")
            return False
        try:
            info = os.stat(path)  # follows a file symlink: its target is what is read
        except OSError as exc:
            self.refuse(path, f"cannot stat (a dangling symlink?): {exc.strerror}")
            return False
        if not stat.S_ISREG(info.st_mode):
            self.refuse(path, "not a regular file (a FIFO, device or socket)")
            return False
        if info.st_size > self.max_file_size:
            self.refuse(path, f"{info.st_size} bytes, over the --max-file-size cap of "
                        f"{self.max_file_size}")
            return False
        self.files.append(prefix + os.fsencode(name), label, info.st_size, info.st_mtime_ns)
        return True


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows symlinks; a loop or dangling link is not a folder
    except OSError:
        return False


def _scan_class(walker: _Walker, folder: str, label: int) -> int:
    """List the image files under root/folder; return how many."""
    found = 0
    # Sorted by folder then name, the order torchvision's ImageFolder uses: same indices.
    for path, names in sorted(walker.walk(str(walker.root / folder)), key=lambda fe: fe[0]):
        prefix = os.fsencode(Path(os.path.relpath(path, walker.root)).as_posix()) + b"/"
        names.sort()
        for name in names:
            found += walker.add(path, prefix, name, label)
    return found


def _check_source(src: Path) -> None:
    if not src.exists():
        raise PackError(f"source {src} does not exist; pass the folder that holds class folders.")
    if not src.is_dir():
        raise PackError(
            f"source {src} is a file, not a folder; pass a folder laid out as "
            "SRC/<class>/<image files>, or a table (.csv .tsv .jsonl .parquet) or tar shards "
            "(.tar .tgz .tar.gz), or force the kind with source_format=."
        )


def scan(src: str | os.PathLike[str], max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> ScanResult:
    """Find classes (sorted non-hidden sub-folders of src) and their image files, recursively.

    Files directly in src, hidden files and non-image extensions are ignored and counted.
    Files that cannot be packed safely (not regular, over max_file_size bytes, below a path
    over PATH_MAX, through a folder link already visited) are listed in result.refused.
    Raises PackError naming src when it is missing, a file, or holds no images.
    """
    root = Path(src).expanduser().absolute()
    _check_source(root)
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise PackError(
            f"cannot read source {root} ({exc.strerror}); check its permissions."
        ) from None
    result = ScanResult(root=root, classes=[], files=Listing.from_files([]))
    walker = _Walker(root, result, max_file_size)
    walker.visited.add((os.stat(root).st_dev, os.stat(root).st_ino))
    for entry in entries:
        if _is_hidden(entry.name):
            result.ignored_hidden += 1
        elif _is_dir(entry):
            result.classes.append(entry.name)
        else:
            result.ignored_outside_classes += 1
    # Class folders are walked as classes, so a link into one from elsewhere is refused.
    walkable = [walker.enter(str(root / name), False) for name in result.classes]
    for label, name in enumerate(result.classes):
        if not walkable[label] or _scan_class(walker, name, label) == 0:
            result.empty_classes.append(name)
    result.files = walker.files.finish()
    if not result.files:
        raise PackError(
            f"source {root} holds no image files in class folders; expected "
            "SRC/<class>/<image>.jpg (or .png, .webp, ...)."
        )
    return result


__all__ = ["IMAGE_EXTENSIONS", "PATH_MAX", "Listing", "ScanResult", "SourceFile", "scan"]
