"""Packed datasets at fsspec URLs (s3://, gs://, http(s)://, file://), read through ShardCache.

The manifest is fetched first and its sha256 names the cache folder of this version of the
dataset: a dataset rewritten remotely gets a new folder, so the versions are never mixed. The
index files and each shard are downloaded whole, hashed while they stream, and trusted only
when the hash matches manifest.json. Network errors retry with backoff, then fail naming the
file and URL; a hash mismatch is fetched once more, then fails naming it; a full cache disk
fails at once (CacheDiskFullError: cache_dir, its free space and cache_limit).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from fastloader.errors import DatasetError, DatasetNotFoundError, OptionalDependencyError
from fastloader.format.cache import ShardCache, parse_size
from fastloader.format.disk_space import is_no_space

log = logging.getLogger(__name__)

_CHUNK = 4 << 20
DEFAULT_CACHE_DIR = "~/.cache/fastloader"

T = TypeVar("T")


class HashMismatchError(DatasetError):
    """A downloaded file's bytes differ from the sha256 manifest.json gives."""


def is_url(data: object) -> bool:
    """Whether data names a dataset by URL (scheme://...), which the remote path reads."""
    return isinstance(data, str) and re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", data) is not None


class Remote:
    """A dataset folder at a URL, read through fsspec with retries.

    Args:
        url: the dataset folder's URL.
        storage_options: passed to fsspec (credentials, endpoint_url, ...).
        retries: attempts per file before failing.
        backoff_s: the first wait between attempts (doubled each time).
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 retries: int = 4, backoff_s: float = 0.2) -> None:
        try:
            import fsspec
        except ImportError as exc:
            raise OptionalDependencyError(
                f"reading {url} needs fsspec (and s3fs for s3://, gcsfs for gs://): "
                "pip install 'fastloader[s3]'") from exc
        self.url = url.rstrip("/")
        try:
            self.fs, self.path = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
        except ImportError as exc:
            raise OptionalDependencyError(
                f"reading {url} needs fsspec's backend for its scheme ({exc}); "
                "pip install s3fs (s3://), gcsfs (gs://) or aiohttp (http://)") from exc
        self.retries = retries
        self.backoff_s = backoff_s

    def url_of(self, name: str) -> str:
        """The URL of member `name` of the dataset."""
        return f"{self.url}/{name}"

    def _attempts(self, name: str, job: Callable[[], T]) -> T:
        for attempt in range(self.retries):
            try:
                return job()
            except (FileNotFoundError, HashMismatchError):
                raise
            except Exception as exc:  # network errors: retried, then reported with the URL
                if is_no_space(exc):  # the local disk, not the network: no retry (the cache
                    raise  # names its folder, free space and limit: cache.ShardCache.fetch)
                if attempt + 1 == self.retries:
                    raise DatasetError(
                        f"{name}: downloading {self.url_of(name)} failed {self.retries} times "
                        f"(last: {type(exc).__name__}: {exc}); check the network, the URL and "
                        "the credentials (AWS_ENDPOINT_URL, storage_options=).") from exc
                wait = self.backoff_s * 2**attempt
                log.warning("%s: %s: %s; retrying in %.1fs", self.url_of(name),
                            type(exc).__name__, exc, wait)
                time.sleep(wait)
        raise AssertionError("unreachable")

    def read_bytes(self, name: str) -> bytes:
        """The whole (small) member `name`; DatasetNotFoundError if it does not exist."""
        def job() -> bytes:
            with self.fs.open(f"{self.path}/{name}", "rb") as src:
                return bytes(src.read())
        try:
            data: bytes = self._attempts(name, job)
        except FileNotFoundError:
            raise DatasetNotFoundError(
                f"{self.url_of(name)} does not exist: {self.url} is not a packed dataset "
                "(pack one there with `packdata SRC URL`).") from None
        return data

    def stream(self, name: str, size: int, sha256: str, out: BinaryIO) -> None:
        """Write member `name` into out, checking its size and sha256 while it streams."""
        def job() -> None:
            out.seek(0)
            out.truncate()
            digest = hashlib.sha256()
            with self.fs.open(f"{self.path}/{name}", "rb", block_size=_CHUNK) as src:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
            got = out.tell()
            if got != size or digest.hexdigest() != sha256:
                raise HashMismatchError(
                    f"{self.url_of(name)}: downloaded {got} bytes with sha256 "
                    f"{digest.hexdigest()[:16]}..., manifest.json says {size} bytes, "
                    f"{sha256[:16]}...")
        try:
            self._attempts(name, job)
        except FileNotFoundError:
            raise DatasetError(f"{name}: {self.url_of(name)} is missing although manifest.json "
                               "lists it; the remote dataset is incomplete: upload it "
                               "again.") from None


def fetch_verified(cache: ShardCache, remote: Remote, local: str, name: str, size: int,
                   sha256: str) -> Path:
    """Member `name` of the remote dataset in the cache as `local`, pinned; a hash mismatch is
    fetched once more, then fails naming the file and URL."""
    for attempt in (1, 2):
        try:
            return cache.fetch(local, size, lambda out: remote.stream(name, size, sha256, out))
        except HashMismatchError as exc:
            if attempt == 2:
                raise HashMismatchError(
                    f"{exc}; fetched twice with the same result: the remote file was changed "
                    f"or damaged after manifest.json was written. Run `packdata verify "
                    f"{remote.url}`, or pack and upload the dataset again.") from None
            log.warning("%s; fetching it once more", exc)
    raise AssertionError("unreachable")


def cache_folder(url: str, manifest_bytes: bytes) -> str:
    """The cache subfolder of this version of the dataset at url: a readable name + hashes."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", url.rstrip("/").rsplit("/", 1)[-1])[:60]
    where = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:12]
    version = hashlib.sha256(manifest_bytes).hexdigest()[:16]
    return f"{tail}-{where}-{version}"


def open_cache(cache_dir: str | os.PathLike[str] | None, cache_limit: int | str | None
               ) -> ShardCache:
    """The ShardCache at cache_dir (default $FASTLOADER_CACHE_DIR or ~/.cache/fastloader)."""
    folder = cache_dir or os.environ.get("FASTLOADER_CACHE_DIR") or DEFAULT_CACHE_DIR
    return ShardCache(folder, parse_size(cache_limit))
