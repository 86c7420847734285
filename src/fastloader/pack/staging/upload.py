"""Packed datasets to and from object storage: upload (manifest.json last) and download.

A reader trusts a remote dataset only through its manifest.json, so upload writes the shards,
then the index, then any other file, and manifest.json last: a reader never sees a
half-uploaded dataset. Replacing one (--overwrite) removes the old manifest.json first.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any

from fastloader.errors import PackError
from fastloader.format.manifest import read_manifest
from fastloader.format.remote import Remote


def put(remote: Remote, local: Path, name: str) -> None:
    """Upload the local file as member `name` of the remote folder; its size checked."""
    target = f"{remote.path}/{name}"
    # Object stores have no folders, but file:// and other file systems need the parents.
    remote.fs.makedirs(posixpath.dirname(target), exist_ok=True)
    remote._attempts(name, lambda: remote.fs.put_file(os.fspath(local), target))
    size = remote.fs.size(target)
    if size != local.stat().st_size:
        raise PackError(f"{remote.url_of(name)}: uploaded {size} bytes of "
                        f"{local.stat().st_size}; check the storage and run again.")


def upload(folder: str | os.PathLike[str], url: str, overwrite: bool = False,
           storage_options: dict[str, Any] | None = None) -> int:
    """Upload the packed dataset at folder to url; returns the bytes uploaded.

    Args:
        folder: a packed dataset folder (pack() output).
        url: where it goes (s3://bucket/x.lmdb, gs://..., file://...).
        overwrite: replace a dataset already at url.
        storage_options: fsspec options (credentials, endpoint_url, ...).

    Returns:
        int: bytes uploaded.

    Raises:
        PackError: a dataset is at url already (without overwrite), or an upload failed.
    """
    root = Path(folder)
    manifest = read_manifest(root)  # checks it is whole before anything is sent
    remote = Remote(url, storage_options)
    if remote.fs.exists(f"{remote.path}/manifest.json"):
        if not overwrite:
            raise PackError(f"{url} already holds a packed dataset; pass --overwrite to "
                            "replace it.")
        remote.fs.rm_file(f"{remote.path}/manifest.json")  # readers stop trusting it first
    order = [s.file for s in manifest.shards] + [f.file for f in manifest.fields.values()]
    rest = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.name != "manifest.json")
    order += [name for name in rest if name not in order]
    sent = 0
    for name in [*order, "manifest.json"]:
        put(remote, root / name, name)
        sent += (root / name).stat().st_size
    return sent


def download(url: str, folder: str | os.PathLike[str],
             storage_options: dict[str, Any] | None = None) -> Path:
    """A full local copy of the dataset at url in folder (each file sha256-checked against
    manifest.json while it streams); returns folder."""
    remote = Remote(url, storage_options)
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    raw = remote.read_bytes("manifest.json")
    (root / "manifest.json").write_bytes(raw)
    manifest = read_manifest(root)
    members = [(s.file, s.bytes, s.sha256) for s in manifest.shards]
    members += [(f.file, int(remote.fs.size(f"{remote.path}/{f.file}")), f.sha256)
                for f in manifest.fields.values()]
    for name, size, sha in members:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        with open(root / name, "wb") as out:
            remote.stream(name, size, sha, out)
    return root
