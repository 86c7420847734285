"""Walk an ImageFolder-style tree: sorted class folders, image files found recursively."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from fastloader.errors import PackError

IMAGE_EXTENSIONS = frozenset(
    {
        ".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".webp", ".bmp", ".gif",
        ".tif", ".tiff", ".ppm", ".pgm", ".pbm", ".pnm",
    }
)  # fmt: skip


@dataclass(frozen=True)
class SourceFile:
    """One image file to pack: path relative to SRC (POSIX), label, and size/mtime for resume."""

    relpath: str
    label: int
    size: int
    mtime_ns: int


@dataclass
class ScanResult:
    """What scan() found under SRC."""

    root: Path
    classes: list[str]
    files: list[SourceFile]
    ignored_hidden: int = 0
    ignored_non_image: int = 0
    ignored_outside_classes: int = 0
    empty_classes: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _scan_class(root: Path, folder: str, label: int, result: ScanResult) -> int:
    """Append the image files under root/folder to result.files; return how many."""
    found = 0
    walked = []
    for dirpath, dirnames, filenames in os.walk(root / folder, followlinks=True):
        result.ignored_hidden += sum(_is_hidden(d) for d in dirnames)
        dirnames[:] = [d for d in dirnames if not _is_hidden(d)]
        walked.append((dirpath, filenames))
    # Sorted by folder then name, the order torchvision's ImageFolder uses: same indices.
    for dirpath, filenames in sorted(walked):
        for name in sorted(filenames):
            if _is_hidden(name):
                result.ignored_hidden += 1
                continue
            if os.path.splitext(name)[1].lower() not in IMAGE_EXTENSIONS:
                result.ignored_non_image += 1
                continue
            path = Path(dirpath) / name
            try:
                stat = path.stat()
            except OSError:  # a dangling symlink: nothing to pack
                result.ignored_non_image += 1
                continue
            relpath = path.relative_to(root).as_posix()
            result.files.append(SourceFile(relpath, label, stat.st_size, stat.st_mtime_ns))
            found += 1
    return found


def _check_source(src: Path) -> None:
    if not src.exists():
        raise PackError(f"source {src} does not exist; pass the folder that holds class folders.")
    if not src.is_dir():
        raise PackError(
            f"source {src} is a file, not a folder; pass a folder laid out as "
            "SRC/<class>/<image files>."
        )


def scan(src: str | os.PathLike[str]) -> ScanResult:
    """Find classes (sorted non-hidden sub-folders of src) and their image files, recursively.

    Files directly in src, hidden files and non-image extensions are ignored and counted.
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
    result = ScanResult(root=root, classes=[], files=[])
    for entry in entries:
        if _is_hidden(entry.name):
            result.ignored_hidden += 1
        elif entry.is_dir():
            result.classes.append(entry.name)
        else:
            result.ignored_outside_classes += 1
    for label, name in enumerate(result.classes):
        if _scan_class(root, name, label, result) == 0:
            result.empty_classes.append(name)
    if not result.files:
        raise PackError(
            f"source {root} holds no image files in class folders; expected "
            "SRC/<class>/<image>.jpg (or .png, .webp, ...)."
        )
    return result
