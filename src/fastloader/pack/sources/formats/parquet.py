"""Parquet: a file, a brace pattern of files, or a folder of one split's files."""

from __future__ import annotations

from pathlib import Path

from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source


class Parquet(Source):
    """A Parquet table (pack/sources/tables.py, hf_parquet.py)."""

    name = "parquet"
    rank = 20

    def detect(self, probe: Probe) -> bool:
        if probe.is_dir:  # one split's files, as the Hugging Face Hub keeps them
            from fastloader.pack.sources.hf_parquet import is_parquet_folder

            return is_parquet_folder(probe.path)
        return probe.suffix == ".parquet"

    def open(self, src: str, opening: Opening) -> Opened:
        from fastloader.pack.sources.tables import open_table

        return open_table(src, "parquet", opening.fields, opening.image, opening.label,
                          opening.root)

    def files(self, path: str) -> list[Path]:
        from fastloader.pack.sources.hf_parquet import parquet_files

        return parquet_files(path)
