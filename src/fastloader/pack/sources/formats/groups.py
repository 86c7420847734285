"""WebDataset-style file groups: a folder of them, or .tar shards (files, at URLs too)."""

from __future__ import annotations

from pathlib import Path

from fastloader.errors import PackError
from fastloader.format.remote import is_url
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source, digest
from fastloader.pack.sources.types import StorageOptions


def _refuse_table_options(opening: Opening) -> None:
    if opening.image or opening.label or opening.root:
        raise PackError("image=, label= and root= are table options; file groups name "
                        "their fields by extension.")


class Files(Source):
    """A folder of file groups (x.jpg beside x.cls, x.txt ...)."""

    name = "files"
    rank = 30

    def detect(self, probe: Probe) -> bool:
        return probe.folder == "files"

    def open(self, src: str, opening: Opening) -> Opened:
        from fastloader.pack.sources.formats.librispeech import refuse_as
        from fastloader.pack.sources.groups import open_folder

        _refuse_table_options(opening)
        refuse_as(src, 'file groups (source_format="files")')
        return open_folder(Path(src).expanduser().absolute(), opening.fields)

    def files(self, path: str) -> list[Path]:
        return sorted(p for p in Path(path).rglob("*") if p.is_file())


class Tars(Source):
    """.tar shards: a file, a brace pattern, a folder of shards alone, or URLs."""

    name = "tar"
    rank = 10

    def detect(self, probe: Probe) -> bool:
        return probe.tar_name or probe.folder == "tar"

    def open(self, src: str, opening: Opening) -> Opened:
        from fastloader.pack.sources.groups import open_tars

        _refuse_table_options(opening)
        return open_tars(src, opening.fields, opening.storage_options)

    def files(self, path: str) -> list[Path]:
        from fastloader.pack.sources.groups import tar_files

        return [Path(p) for p in tar_files(path)]

    def fingerprint(self, path: str, storage_options: StorageOptions | None) -> str:
        if not is_url(path):
            return super().fingerprint(path, storage_options)
        from fastloader.pack.sources.groups import expand_braces
        from fastloader.pack.sources.scan_remote import stamp
        from fastloader.pack.sources.tar_url import stat_tars

        urls = expand_braces(path)
        entries = []  # [url, size, ETag stamp], one request a tar
        for url, info in zip(urls, stat_tars(urls, storage_options), strict=True):
            if info is None:
                raise PackError(f"{url}: no such tar shard (named by {path!r}).")
            entries.append([url, int(info.get("size") or 0), stamp(info)])
        return digest(entries)
