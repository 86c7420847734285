"""The local cache of remote shards: bounded, verified, shared by every process on the node.

Coordination is through the file system only, so a crash leaves nothing to clean by hand:
- `.cache.lock` (flock, exclusive) serialises the accounting: reserving room and evicting.
- `NAME.lock` (flock, shared) pins NAME: a process reading a file, or about to, holds it, and
  eviction takes it exclusively without waiting, so a pinned file is never evicted.
- `NAME.dl` (flock, exclusive) is held while NAME downloads: one download per file per node;
  the others wait on it, then find the file in place.
- `NAME.part-SIZE-PID` is a download in progress (flock held by its writer from the moment it
  is created, inside the accounting lock). Its SIZE (the file's bytes plus room for its stamp)
  counts against the limit from then on, and the download never writes past the file's size,
  so the bytes never exceed the limit; one whose lock is free belongs to a dead process and is
  deleted.
- a finished download is renamed to NAME only after its sha256 matched, and `NAME.ok` records
  (size, mtime, inode) of the verified file: a file changed afterwards is hashed again. The
  rename and the stamp happen inside the accounting lock, so a count never misses a file
  that is changing its name.
Every byte the folder holds counts (files, downloads in progress, stamps; the lock files are
empty). Flock locks die with their process (no stale lock files to remove, no shared-memory
names).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, cast

from fastloader.errors import DatasetError, invalid_argument
from fastloader.format.disk_space import cache_disk_full, is_no_space

_PART = re.compile(r"\.part-(\d+)-(\d+)$")
# The stamps of verified index versions (format/stamps.py) live in this subfolder of the default
# cache base; they are not cached files: never counted or evicted here (a few hundred bytes each).
STAMPS_FOLDER = "verified"
STAMP_BYTES = 64  # room a download reserves for its NAME.ok ("size mtime_ns inode" is shorter)


def reserved_bytes(size: int) -> int:
    """What a cached file of size bytes counts against the limit: itself and its stamp."""
    return size + STAMP_BYTES


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class CacheFullError(DatasetError):
    """The cache cannot make room: its limit is held by files that readers have pinned."""


def parse_size(value: int | str | None, name: str = "cache_limit") -> int | None:
    """Bytes from an int or a string such as "200GB", "1.5GiB", "500MB" (None: no limit)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if match and match.group(2).lower() in _UNITS:
            size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
            if size > 0:
                return size
    raise invalid_argument(name, value, "must be a positive byte count",
                           "Pass an int or a string such as '200GB', '500MiB'.")


# The fds through which this process holds a flock. A forked child inherits copies of them, and
# a flock lives until every fd of its open file description is closed: a copy left open in the
# child would keep, say, a download lock of the parent's held for as long as the child lives,
# and the child would wait on it forever. The child closes its copies at once.
_HELD: set[int] = set()
_HELD_LOCK = threading.Lock()


def _close_inherited_locks() -> None:
    global _HELD_LOCK
    _HELD_LOCK = threading.Lock()  # a parent thread may have held it at fork time
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def _flock(path: Path, mode: int) -> int | None:
    """An fd holding flock `mode` on path (created if missing), or None if LOCK_NB failed."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    with _HELD_LOCK:
        _HELD.add(fd)
    return fd


def _unlock(fd: int) -> None:
    with _HELD_LOCK:
        if fd not in _HELD:  # a parent's fd this forked child has closed already
            return
        _HELD.discard(fd)
        os.close(fd)  # closing the last fd of the description releases its flock


class ShardCache:
    """A folder of verified files under a byte limit, shared through file locks.

    Args:
        root: the cache folder (created).
        limit: the most bytes its files may hold (None: no limit).
        wait_s: how long a reservation waits for pinned files to be released before failing.
    """

    def __init__(self, root: str | os.PathLike[str], limit: int | None,
                 wait_s: float = 120.0) -> None:
        self.root = Path(root).expanduser().absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self.limit = limit
        self.wait_s = wait_s
        self._pins: dict[str, tuple[int, int]] = {}  # name -> (fd, count) in this process
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.downloads = 0  # files this process downloaded (for stats and tests)
        self.least = 0  # the bytes its reader holds at once (RemoteDataset sets it)

    # -- pins ---------------------------------------------------------------------------

    def _check_fork(self) -> None:
        if self._pid != os.getpid():  # a forked child shares the parent's flocks: drop them
            self._pid = os.getpid()
            self._pins = {}
            self._lock = threading.Lock()

    def pin(self, name: str) -> None:
        """Hold a shared lock on name: eviction skips it until unpin (or this process ends)."""
        self._check_fork()
        with self._lock:
            fd, count = self._pins.get(name, (-1, 0))
            if count == 0:
                path = self.root / f"{name}.lock"
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = _flock(path, fcntl.LOCK_SH)  # type: ignore[assignment]
            self._pins[name] = (fd, count + 1)

    def unpin(self, name: str) -> None:
        """Release one pin of name."""
        self._check_fork()
        with self._lock:
            fd, count = self._pins.get(name, (-1, 0))
            if count <= 1:
                self._pins.pop(name, None)
                if fd >= 0:
                    _unlock(fd)
            else:
                self._pins[name] = (fd, count - 1)

    def unpin_all(self) -> None:
        """Release every pin this process holds."""
        self._check_fork()
        with self._lock:
            for fd, _ in self._pins.values():
                _unlock(fd)
            self._pins = {}

    # -- accounting ---------------------------------------------------------------------

    @contextmanager
    def _accounting(self) -> Iterator[None]:
        fd = _flock(self.root / ".cache.lock", fcntl.LOCK_EX)
        try:
            yield
        finally:
            assert fd is not None
            _unlock(fd)

    def _files(self, stamps: bool = False) -> Iterator[Path]:
        """Every data file and download in progress (with stamps: their NAME.ok too)."""
        skip = (".lock", ".dl") if stamps else (".lock", ".dl", ".ok")
        for folder, subfolders, names in os.walk(self.root):
            if folder == str(self.root) and STAMPS_FOLDER in subfolders:
                subfolders.remove(STAMPS_FOLDER)
            for name in names:
                if not name.endswith(skip):
                    yield Path(folder) / name

    def usage(self) -> int:
        """Bytes held now: finished files and their stamps, plus the full reserved size of
        every download in progress."""
        total = 0
        for path in self._files(stamps=True):
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            match = _PART.search(path.name)
            total += max(size, int(match.group(1))) if match else size
        return total

    def _drop_stale_parts(self) -> None:
        for path in list(self._files()):
            if _PART.search(path.name):
                fd = _flock(path, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if fd is not None:  # its writer is gone: an untrusted leftover
                    path.unlink(missing_ok=True)
                    _unlock(fd)

    def _evict_for(self, size: int) -> bool:
        """Evict unpinned files, least recently used first, until size more bytes fit."""
        assert self.limit is not None
        used = self.usage()
        if used + size <= self.limit:
            return True
        candidates = []
        for path in self._files():
            if _PART.search(path.name) or not path.with_name(path.name + ".lock").exists():
                continue  # only files fetched through fetch() are evictable
            try:  # the lock file's mtime is the last use (fetch touches it)
                lock = path.with_name(path.name + ".lock")
                candidates.append((lock.stat().st_mtime_ns, path))
            except FileNotFoundError:
                continue
        for _, path in sorted(candidates):
            fd = _flock(path.with_name(path.name + ".lock"), fcntl.LOCK_EX | fcntl.LOCK_NB)
            if fd is None:
                continue  # pinned by a reader (this process or another)
            try:
                used -= path.stat().st_size
                path.unlink()
                stamp = path.with_name(path.name + ".ok")
                used -= stamp.stat().st_size
                stamp.unlink()
            except FileNotFoundError:
                pass
            finally:
                _unlock(fd)
            if used + size <= self.limit:
                return True
        return False

    def _reserve(self, name: str, size: int) -> tuple[Path, int]:
        """Create name's .part file, counted at `size` bytes plus its stamp's room, once that
        fits under the limit; returns it with the fd holding its lock.

        The part is created already locked, inside the accounting lock: another reservation's
        _drop_stale_parts never takes a live download for a dead one's leftovers (deleting it
        would free its room twice)."""
        reserved = reserved_bytes(size)
        if self.limit is not None and reserved > self.limit:
            raise CacheFullError(f"{name} is {size} bytes, more than cache_limit={self.limit}; "
                                 "raise cache_limit.")
        deadline = time.monotonic() + self.wait_s
        while True:
            with self._accounting():
                self._drop_stale_parts()  # a killed download's leftovers: never trusted
                if self.limit is None or self._evict_for(reserved):
                    part = self.root / f"{name}.part-{reserved}-{os.getpid()}"
                    part.parent.mkdir(parents=True, exist_ok=True)
                    fd = _flock(part, fcntl.LOCK_EX)  # created locked: live from the start
                    assert fd is not None
                    return part, fd
            if time.monotonic() > deadline:
                raise CacheFullError(
                    f"{self.root}: no room for {name} ({size} bytes) under cache_limit="
                    f"{self.limit} after {self.wait_s:.0f}s: the cache holds {self.usage()} "
                    "bytes pinned by readers. Raise cache_limit, or run fewer readers on "
                    "this cache.")
            time.sleep(0.05)

    # -- files --------------------------------------------------------------------------

    def _stamp(self, path: Path) -> str:
        st = path.stat()
        return f"{st.st_size} {st.st_mtime_ns} {st.st_ino}"

    def is_verified(self, name: str) -> bool:
        """Whether name is in place and unchanged since its download was verified."""
        path = self.root / name
        try:
            return (path.with_name(path.name + ".ok").read_text() == self._stamp(path))
        except (FileNotFoundError, NotADirectoryError):
            return False

    def fetch(self, name: str, size: int, download: Callable[[BinaryIO], None]) -> Path:
        """name's path, downloaded first if missing or changed, pinned until unpin(name).

        `download(file)` writes the whole verified content (it raises if the bytes are wrong);
        it runs at most once per node for concurrent callers. A full disk raises
        CacheDiskFullError (disk_space.cache_disk_full).
        """
        self.pin(name)
        try:
            path = self.root / name
            while not self.is_verified(name):
                dl = _flock(self.root / f"{name}.dl", fcntl.LOCK_EX)
                assert dl is not None
                try:
                    if not self.is_verified(name):
                        self._download(name, size, download)
                finally:
                    _unlock(dl)
            os.utime(path.with_name(path.name + ".lock"))  # LRU: last use
            return path
        except BaseException as exc:
            self.unpin(name)
            if is_no_space(exc):  # the cache's disk filled: say so, with what would fit
                raise cache_disk_full(self.root, self.limit, self.usage(), self.least, name,
                                      size) from exc
            raise

    def _download(self, name: str, size: int, download: Callable[[BinaryIO], None]) -> None:
        path = self.root / name
        path.unlink(missing_ok=True)  # changed or unverified: never trusted
        part, fd = self._reserve(name, size)
        try:
            with open(part, "wb") as out:
                download(cast(BinaryIO, _Capped(out, size)))
                out.flush()
                os.fsync(out.fileno())
            with self._accounting():  # a count in progress sees the part or the file, not neither
                os.replace(part, path)
                path.with_name(path.name + ".ok").write_text(self._stamp(path))
            self.downloads += 1
        finally:
            part.unlink(missing_ok=True)
            _unlock(fd)


class _Capped:
    """The file a download writes, holding at most `size` bytes: bytes past them (a remote
    file longer than the manifest says) are counted, not written, so the download still sees
    its true length (and fails its size check) without crossing the room it reserved."""

    def __init__(self, out: BinaryIO, size: int) -> None:
        self._out, self._size, self._pos = out, size, 0

    def write(self, data: bytes) -> int:
        room = max(0, self._size - self._pos)
        if room:
            self._out.seek(self._pos)
            self._out.write(memoryview(data)[:room])
        self._pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence != os.SEEK_SET:
            raise ValueError("a cache download seeks from the start only")
        self._pos = offset
        return offset

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        return self._out.truncate(min(size, self._size))

    def flush(self) -> None:
        self._out.flush()
