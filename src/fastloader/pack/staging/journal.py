"""The staging folder of a pack in progress: lock, plan, per-shard journal, final rename."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastloader.errors import PackError
from fastloader.format.manifest import MANIFEST_NAME

JOURNAL_DIR = "journal"
LOCK_NAME = ".lock"
PLAN_DIR = "plan"  # the shard plan's arrays and description (staging/plan.py)
PLAN_NAME = "plan.json"  # in the staging folder: the identity (backend, options)

# The staging locks this process holds. A pool worker forked while one is held would keep a
# copy of its fd, and a flock lives until its last fd closes: when the packer is killed, its
# orphaned workers would hold the lock and `--resume` would find "another packdata" writing.
# Forked children close their copies at once (the parent's lock is not affected).
_HELD_LOCKS: set[int] = set()


def _close_inherited_locks() -> None:
    for fd in list(_HELD_LOCKS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def same_identity(old: dict[str, object] | None, new: dict[str, object]) -> bool:
    """Whether a staged plan.json (old) is one a resume may reuse parts of: equal to new, bar
    the whole-source fingerprint when both plans keep per-item keys (each part's digest then
    tells whether its own items changed)."""
    if old is None:
        return False
    if old.get("item_keys") and new.get("item_keys"):
        def bare(plan: dict[str, Any]) -> dict[str, object]:  # plan.json's: JSON
            source = {k: v for k, v in plan.get("source", {}).items() if k != "fingerprint"}
            return plan | {"source": source}

        return bare(old) == bare(new)
    return old == new


RESUME_LOG = logging.getLogger("fastloader.pack.resume")  # resume's decisions (packdata shows them)


def note_resume(dst: object, old: dict[str, object] | None, new: dict[str, object], resume: bool
                ) -> None:
    """Say on RESUME_LOG why a resume starts from nothing: no staged pack, or one planned
    from another source or with other options (naming what differs), which is cleared."""
    if not resume:
        return
    if old is None:
        RESUME_LOG.warning("resume: no interrupted pack of %s to resume; packing from the "
                           "start", dst)
    elif not same_identity(old, new):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        RESUME_LOG.warning("resume: the interrupted pack of %s had another source or other "
                           "options (%s differ); starting over, its shards are cleared",
                           dst, ", ".join(keys))


def staging_path(dst: Path) -> Path:
    """The hidden sibling folder a pack of dst is built in: .NAME.partial"""
    return dst.parent / f".{dst.name}.partial"


def write_atomic(path: Path, text: str) -> None:
    """Write text to path durably and atomically (a hidden temporary beside it, fsync'd,
    renamed over it). The temporary is named by pid: two processes writing the same file (an
    engine retrying a task that still runs) never share one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def sha256_file(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of a file, read in 4 MiB blocks (never whole into memory)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return path.stat().st_size, digest.hexdigest()


def file_digest(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of a file just written, after making sure its bytes are on disk."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    return sha256_file(path)


class Staging:
    """Owns DST's staging folder for one pack: locked so two packs cannot share it."""

    def __init__(self, dst: Path) -> None:
        self.dst = dst
        self.dir = staging_path(dst)
        self.journal = self.dir / JOURNAL_DIR
        self._lock_fd: int | None = None

    def open(self, plan: dict[str, object], resume: bool) -> None:
        """Create or reuse the folder; keep earlier shards only when resuming the same plan."""
        for _ in range(100):  # retried only while other packs finish or swap the folder
            if self._lock():
                break
        else:
            raise PackError(f"could not lock {self.dir}: other packdata runs keep replacing it; "
                            "run one packdata per DST at a time.")
        plan_path = self.dir / PLAN_NAME
        old_plan = json.loads(plan_path.read_text()) if plan_path.is_file() else None
        note_resume(self.dst, old_plan, plan, resume)
        if not resume or not same_identity(old_plan, plan):
            self._clear()
        self.journal.mkdir(exist_ok=True)
        write_atomic(plan_path, json.dumps(plan, sort_keys=True))

    def adopt(self) -> None:
        """Lock a planned pack's staging folder as it is (`packdata commit`): nothing cleared."""
        if not (self.dir / PLAN_NAME).is_file():
            raise PackError(f"{self.dst} has no planned pack ({self.dir / PLAN_NAME} is "
                            f"missing); run `packdata plan SRC {self.dst}` first.")
        if not self._lock():
            raise PackError(f"{self.dir} was replaced while locking it; run the command again.")

    def _lock(self) -> bool:
        """Take the staging folder's lock; False when the lock file found was not the one in
        place any more (a pack finished and moved its folder away meanwhile: try again)."""
        created = False
        try:
            self.dir.mkdir(exist_ok=True)
            created = True
            fd = os.open(self.dir / LOCK_NAME, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        except FileNotFoundError as exc:
            if created:  # the folder was renamed away between mkdir and open
                return False
            raise PackError(f"cannot write in {self.dir.parent} ({exc.strerror}); choose a "
                            "DST whose parent folder exists and is writable.") from None
        except OSError as exc:
            raise PackError(
                f"cannot write in {self.dir.parent} ({exc.strerror}); choose a DST whose "
                "parent folder exists and is writable."
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PackError(
                f"another packdata is writing {self.dst} right now (lock on {self.dir}); "
                "wait for it to finish or choose another DST."
            ) from None
        try:  # the lock counts only if its file is still this folder's .lock
            same = os.path.samestat(os.fstat(fd), os.stat(self.dir / LOCK_NAME))
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return False
        self._lock_fd = fd
        _HELD_LOCKS.add(fd)
        return True

    def gather(self) -> None:
        """The parts are in this folder already (a URL's are downloaded: remote_stage.py)."""
        return None

    def _clear(self) -> None:
        for entry in self.dir.iterdir():
            if entry.name == LOCK_NAME:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def finish(self, write_manifest: Callable[[Path], object], overwrite: bool) -> None:
        """Drop the journal, write the manifest (last file), rename the folder to DST.

        The lock file moves with the folder and is removed from DST only after the rename, so
        no other pack can lock (and clear) this folder between the manifest and the rename.
        """
        shutil.rmtree(self.journal, ignore_errors=True)
        shutil.rmtree(self.dir / PLAN_DIR, ignore_errors=True)
        (self.dir / PLAN_NAME).unlink(missing_ok=True)
        write_manifest(self.dir)
        trash = self.dst.parent / f".{self.dst.name}.old-{os.getpid()}"
        present = self.dst.exists() or self.dst.is_symlink()
        if present and not overwrite:
            raise PackError(
                f"{self.dst} appeared while this pack ran (another packdata finished it?); "
                "rerun with --overwrite to replace it, or choose another DST."
            )
        if present:
            os.rename(self.dst, trash)
        os.rename(self.dir, self.dst)
        (self.dst / LOCK_NAME).unlink(missing_ok=True)  # the flock stays held on the open fd
        _fsync_dir(self.dst.parent)
        if present:
            if trash.is_dir() and not trash.is_symlink():
                shutil.rmtree(trash, ignore_errors=True)
            else:
                trash.unlink(missing_ok=True)

    def release(self) -> None:
        """Unlock (the folder stays, so --resume can reuse its shards after a failure)."""
        if self._lock_fd is not None:
            if self._lock_fd in _HELD_LOCKS:  # not when a forked child closed its copy
                _HELD_LOCKS.discard(self._lock_fd)
                with contextlib.suppress(OSError):
                    os.close(self._lock_fd)
            self._lock_fd = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_dataset(path: Path) -> bool:
    """Whether path is a finished packed dataset folder (it has a manifest)."""
    return (path / MANIFEST_NAME).is_file()
