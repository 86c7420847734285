"""WebDataset .tar shards at fsspec URLs (s3://, gs://, file://, ...): their stat, the header
walk's file and ranged reads.

One file system instance per process and storage options: fsspec's instance cache, which
is keyed on the pid (a forked child makes its own; an async one like s3fs must not cross a
fork, and fsspec resets its event loop in the child). None is ever pickled: a TarIndex over
URLs keeps only the URLs and the options. Without storage_options the credentials and endpoint come
from the environment (AWS_ENDPOINT_URL, ...), as fsspec's backends read them.
"""

from __future__ import annotations

from typing import Any

from fastloader.format.remote import Remote
from fastloader.pack.sources.types import StorageOptions

# The walk reads ahead this much per request: the headers between members smaller than this
# arrive together (a shard of 100 KiB images: one request per 4 MiB, not one per header).
WALK_BLOCK = 4 << 20

def filesystem(url: str, storage_options: StorageOptions | None) -> tuple[Any, str]:
    """(this process's file system for url's scheme and the options, url's path in it):
    format/remote.Remote's, so the missing-package errors are the dataset reader's."""
    remote = Remote(url, storage_options)  # fsspec's instance cache: one per process
    return remote.fs, remote.path


def stat_tars(urls: list[str], storage_options: StorageOptions | None
              ) -> list[dict[str, Any] | None]:
    """fs.info of each URL (one request each, never a cached listing); None where there is
    no such object."""
    found: list[dict[str, Any] | None] = []
    for url in urls:
        fs, path = filesystem(url, storage_options)
        fs.invalidate_cache(path)
        try:
            info = fs.info(path)
        except FileNotFoundError:
            info = None
        found.append(info if info and info.get("type", "file") == "file" else None)
    return found


def open_for_walk(url: str, storage_options: StorageOptions | None) -> Any:
    """url as a seekable binary file reading ahead WALK_BLOCK bytes a request (fsspec's
    AbstractBufferedFile: untyped, and its .size is no IO[bytes]'s)."""
    fs, path = filesystem(url, storage_options)
    return fs.open(path, "rb", block_size=WALK_BLOCK, cache_type="readahead")


def read_range(url: str, offset: int, size: int, storage_options: StorageOptions | None
               ) -> bytes:
    """size bytes at offset of the object at url, one ranged request (fewer bytes if it
    shrank); a storage client's own errors become OSError."""
    if size <= 0:
        return b""
    fs, path = filesystem(url, storage_options)
    try:
        return bytes(fs.cat_file(path, start=offset, end=offset + size))
    except OSError:
        raise
    except Exception as exc:  # botocore's, gcsfs's ...: the object is unreadable
        raise OSError(f"{type(exc).__name__}: {exc}") from exc


__all__ = ["WALK_BLOCK", "filesystem", "open_for_walk", "read_range", "stat_tars"]
