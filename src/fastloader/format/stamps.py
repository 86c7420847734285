"""Verified stamps: a dataset's index is hashed and range-checked once per version, not at
every open on every rank.

A stamp is a small file in the stamp folder (FASTLOADER_CACHE_DIR or ~/.cache/fastloader,
then verified/) named by the sha256 of the dataset's real path and of its manifest.json bytes.
It holds the identity of every index file that passed: (size, mtime_ns, ctime_ns, inode,
device) of the very file descriptor that was hashed and is mapped. An open trusts the index
only when every file it maps has exactly the identity the stamp recorded; anything else (a
write in place, even one of the same size whose mtime was set back: the ctime moves, which no
user can set; a file replaced or copied: a new inode; another manifest: another stamp name)
makes it hash and check the index again before any record is read. Next to the stamp lies the
distinct (height, width) shapes found while checking, so a loader's output size needs no scan.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from fastloader.format.cache import STAMPS_FOLDER, _flock, _unlock

STAMP_VERSION = 1
DEFAULT_BASE = "~/.cache/fastloader"


def stamp_folder() -> Path:
    """Where stamps live: FASTLOADER_CACHE_DIR (the shard cache's base) or
    ~/.cache/fastloader, then verified/ (the shard cache does not count it)."""
    base = os.environ.get("FASTLOADER_CACHE_DIR") or DEFAULT_BASE
    return Path(base).expanduser() / STAMPS_FOLDER


def identity(stats: Mapping[str, os.stat_result]) -> dict[str, list[int]]:
    """Each index file's (size, mtime_ns, ctime_ns, inode, device), by field name."""
    return {name: [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
            for name, st in sorted(stats.items())}


class Stamp:
    """The stamp of one version of one dataset (root's real path + manifest.json's bytes).

    Every failure to read or write it (a read-only home, a full disk) only means the index is
    checked again: a stamp is never needed, only trusted when it matches exactly."""

    def __init__(self, root: Path, manifest_bytes: bytes, folder: Path | None = None) -> None:
        self.manifest_sha = hashlib.sha256(manifest_bytes).hexdigest()
        key = hashlib.sha256(f"{os.path.realpath(root)}\0{self.manifest_sha}".encode(
            "utf-8", "surrogateescape")).hexdigest()
        self.folder = folder if folder is not None else stamp_folder()
        self.path = self.folder / f"{key}.json"
        self.shapes_path = self.folder / f"{key}.shapes.npy"

    def _content(self, files: Mapping[str, os.stat_result]) -> str:
        return json.dumps({"version": STAMP_VERSION, "manifest_sha256": self.manifest_sha,
                           "files": identity(files)}, sort_keys=True)

    def matches(self, files: Mapping[str, os.stat_result]) -> bool:
        """Whether a stamp vouches for exactly these files (their fstat results)."""
        try:
            return self.path.read_text(encoding="utf-8") == self._content(files)
        except (OSError, UnicodeDecodeError):
            return False

    def write(self, files: Mapping[str, os.stat_result], shapes: np.ndarray) -> None:
        """Record that these files passed every check (atomic; failures ignored)."""
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.shapes_path.with_name(f"{self.shapes_path.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as handle:
                np.save(handle, np.ascontiguousarray(shapes, np.int64), allow_pickle=False)
            os.replace(tmp, self.shapes_path)  # before the stamp: a stamp implies its shapes
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(self._content(files), encoding="utf-8")
            os.replace(tmp, self.path)

    def shapes(self) -> np.ndarray | None:
        """The distinct (height, width) shapes recorded with the stamp (None: none)."""
        try:
            shapes = np.load(self.shapes_path, allow_pickle=False)
        except (OSError, ValueError):
            return None
        if shapes.ndim != 2 or shapes.shape[1] != 2 or shapes.dtype != np.int64:
            return None
        return shapes

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held while one process checks the index, so the ranks of a node starting together
        check it once (the others wait, then find the stamp). No lock, no wait: each checks."""
        fd = None
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = _flock(self.path.with_name(self.path.name + ".lock"), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fd is not None:
                _unlock(fd)
