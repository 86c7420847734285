"""CSV, TSV and JSONL tables (one row a sample), known by their suffix."""

from __future__ import annotations

from pathlib import Path

from fastloader.errors import PackError
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source


class Table(Source):
    """A .csv, .tsv or .jsonl table (pack/sources/tables.py)."""

    rank = 50

    def __init__(self, name: str) -> None:
        self.name = name

    def detect(self, probe: Probe) -> bool:
        return not probe.is_dir and probe.suffix == "." + self.name

    def open(self, src: str, opening: Opening) -> Opened:
        from fastloader.pack.sources.formats.common_voice import is_split_table
        from fastloader.pack.sources.tables import open_table

        if is_split_table(Path(src).expanduser()):
            raise PackError(f"{src} is a Common Voice table (its clips are under clips/, "
                            "read without quoting): pack it with source_format="
                            '"commonvoice", or let it be detected.')
        return open_table(src, self.name, opening.fields, opening.image, opening.label,
                          opening.root)
