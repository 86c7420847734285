"""Verified stamps: a dataset's index is hashed and range-checked once per version, not at
every open on every rank.

A stamp is a small file in the stamp folder (FASTLOADER_CACHE_DIR or ~/.cache/fastloader,
then verified/), at ROOT/MANIFEST.json: the sha256 of the dataset's real path, then of its
manifest.json bytes. It holds the identity of every index file that passed: (size, mtime_ns,
ctime_ns, inode, device) of the very file descriptor that was hashed and is mapped. An open
trusts the index only when every file it maps has exactly the identity the stamp recorded;
anything else (a write in place, even one of the same size whose mtime was set back: the ctime
moves, which no user can set; a file replaced or copied: a new inode; another manifest: another
stamp name) makes it hash and check the index again before any record is read. Next to the
stamp lies the distinct (height, width) shapes found while checking, so a loader's output size
needs no scan.

Stamps are pruned when one is written: the same dataset's other versions at once (they can
never match again; a folder per dataset makes that a listing of a few names), and once a day
the folders of datasets that no longer exist, so the stamp folder holds about one stamp per
dataset that exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from fastloader.format.cache import STAMPS_FOLDER, _flock, _unlock

STAMP_VERSION = 2  # 2: at ROOT/MANIFEST.json (a dataset's other versions beside it), holding
# the dataset's real path (so the stamps of a dataset that is gone can be found)
DEFAULT_BASE = "~/.cache/fastloader"
SWEPT = ".swept"  # its mtime: when the stamps of datasets that are gone were last sought
SWEEP_EVERY_S = 24 * 3600.0  # reading every stamp at every write would be quadratic
STALE_S = 3600.0  # a .tmp, or a stamp folder with no stamp, this old: its writer died


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
        self.root = os.path.realpath(root)
        root_key = hashlib.sha256(self.root.encode("utf-8", "surrogateescape")).hexdigest()
        self.folder = (folder if folder is not None else stamp_folder()) / root_key
        self.path = self.folder / f"{self.manifest_sha}.json"
        self.shapes_path = self.folder / f"{self.manifest_sha}.shapes.npy"

    def _content(self, files: Mapping[str, os.stat_result]) -> str:
        return json.dumps({"version": STAMP_VERSION, "manifest_sha256": self.manifest_sha,
                           "root": self.root, "files": identity(files)}, sort_keys=True)

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
            prune(self)  # only after a write that worked: a read-only folder is left alone

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


def _old(path: Path, now: float) -> bool:
    try:
        return now - os.stat(path).st_mtime > STALE_S
    except OSError:
        return False


def _remove_files(folder: Path, keep: str | None = None) -> None:
    """Every file of a dataset's stamp folder but those of the `keep` version (a dead writer's
    .tmp of it goes too; a holder of a removed lock loses nothing: without a lock each rank
    checks the index itself); the folder too when nothing is kept."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    now = time.time()
    for name in names:
        if keep is None or name.split(".", 1)[0] != keep or (
                name.endswith(".tmp") and _old(folder / name, now)):
            with contextlib.suppress(OSError):
                os.unlink(folder / name)
    if keep is None:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _stamped_root(folder: Path) -> str | None:
    """The dataset a stamp folder vouches for (from any of its stamps), None where no stamp
    of this version can be read (it can never match)."""
    try:
        stamps = [name for name in os.listdir(folder) if name.endswith(".json")]
    except OSError:
        return None
    for name in stamps:
        try:
            content = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        root = content.get("root") if isinstance(content, dict) else None
        if content.get("version") == STAMP_VERSION and isinstance(root, str):
            return root
    return None


def _sweep_due(base: Path, now: float) -> bool:
    """Whether a day passed since the last sweep (then this process marks it as done)."""
    marker = base / SWEPT
    try:
        if now - marker.stat().st_mtime < SWEEP_EVERY_S:
            return False
        os.utime(marker, (now, now))
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            marker.touch()
    except OSError:
        return False
    return True


def _sweep(base: Path, kept: Path, now: float) -> None:
    """Remove the stamp folders of datasets that are gone, or with no readable stamp of this
    version (an hour old: a live writer fills a new folder at once), and older versions'
    loose files at the top."""
    try:
        entries = [entry for entry in os.scandir(base) if entry.name != SWEPT]
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        if path == kept:
            continue
        if not entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.unlink(path)  # stamp version 1 lay here, named ROOT+MANIFEST.json
            continue
        root = _stamped_root(path)
        if (root is None and _old(path, now)) or (root is not None and not os.path.isdir(root)):
            _remove_files(path)


def prune(kept: Stamp) -> None:
    """Remove the stamps that can never match again: the kept stamp's dataset's other
    versions at every write, and once a day the stamps of datasets that are gone. Failures
    are ignored."""
    _remove_files(kept.folder, keep=kept.manifest_sha)
    base = kept.folder.parent
    now = time.time()
    if _sweep_due(base, now):
        _sweep(base, kept.folder, now)
