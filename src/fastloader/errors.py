"""The one error family: every message says what went wrong, where, and how to fix it."""

from __future__ import annotations

import errno
from pathlib import Path


class FastloaderError(Exception):
    """Base of every error fastloader raises on purpose."""


class InvalidArgumentError(FastloaderError, ValueError):
    """An argument has a value outside its rule."""


class InvalidTypeError(FastloaderError, TypeError):
    """An argument has the wrong type."""


class DatasetError(FastloaderError):
    """A packed dataset is missing, incomplete or inconsistent."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The path does not hold a packed dataset."""


class CorruptRecordError(DatasetError):
    """A record's bytes do not match what the index says (length, checksum, shard bounds)."""


class DecodeError(FastloaderError, ValueError):
    """Image bytes could not be decoded."""


class ProducerError(FastloaderError, RuntimeError):
    """An exception other than a FastloaderError raised while a batch was produced; chained
    to the original (its __cause__), naming the stage and the batch."""


class PackError(FastloaderError):
    """Packing a source tree failed (bad source, unwritable destination, bad files in --strict)."""


class DiskFullError(FastloaderError, OSError):
    """A disk fastloader writes to has too little room: `folder` (where it writes), `needed`
    (the bytes it needs there: an estimate; None when unknown) and `free` (the bytes free).
    An OSError with errno ENOSPC too, so code that caught the raw OSError still catches it.
    Raised as one of its two kinds: a pack's (a PackError) or a shard cache's (a
    DatasetError), so each stays in the family its interface already raises."""

    def __init__(self, message: str, folder: str | Path, needed: int | None, free: int
                 ) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC
        self.folder, self.needed, self.free = Path(folder), needed, free

    def __reduce__(self) -> tuple[object, ...]:  # crosses to and from worker processes whole
        return _rebuilt, (type(self), str(self), dict(self.__dict__))


def _rebuilt(cls: type[DiskFullError], message: str, facts: dict[str, object]
             ) -> DiskFullError:
    error = cls.__new__(cls, message)
    error.args, error.errno = (message,), errno.ENOSPC
    error.__dict__.update(facts)
    return error


class PackDiskFullError(DiskFullError, PackError):
    """A pack's destination disk is (or would be) full: refused before the pack started (the
    estimate is clearly larger than the free space), or stopped mid-way. Besides folder,
    needed and free: `dst`, `staging` (the hidden .DST.partial folder) and `kept` (whether it
    holds finished shards that resume=True reuses)."""

    def __init__(self, message: str, folder: str | Path, needed: int | None, free: int, *,
                 dst: str | Path, staging: str | Path, kept: bool) -> None:
        super().__init__(message, folder, needed, free)
        self.dst, self.staging, self.kept = Path(dst), Path(staging), kept


class CacheDiskFullError(DiskFullError, DatasetError):
    """The disk of a remote dataset's shard cache filled while a file was downloaded into it
    (raised at once: no network retries). Besides folder (= `cache_dir`), needed and free:
    `cache_limit` (None: no limit) and `name` (the file being cached)."""

    def __init__(self, message: str, folder: str | Path, needed: int | None, free: int, *,
                 cache_limit: int | None, name: str) -> None:
        super().__init__(message, folder, needed, free)
        self.cache_limit, self.name = cache_limit, name

    @property
    def cache_dir(self) -> Path:
        """The cache folder (the loader's cache_dir), on the full disk."""
        return self.folder


class NativeUnavailableError(FastloaderError, ImportError):
    """The compiled extension was demanded but is not usable."""


class RemoteWorkersLostError(FastloaderError):
    """Every remote worker of a loader is gone and Remote(on_lost="raise") was asked."""


class OptionalDependencyError(FastloaderError, ImportError):
    """An optional package (DALI, matplotlib, ...) is needed for the asked feature."""


def invalid_argument(name: str, value: object, rule: str, fix: str) -> InvalidArgumentError:
    """Build an InvalidArgumentError naming the argument, the value, the rule and the fix."""
    return InvalidArgumentError(f"{name}={value!r} is invalid: {rule}. {fix}")


def invalid_type(name: str, value: object, expected: str) -> InvalidTypeError:
    """Build an InvalidTypeError naming the argument, what it got and what it takes."""
    return InvalidTypeError(
        f"{name} must be {expected}, got {type(value).__name__} ({value!r:.80})."
    )
