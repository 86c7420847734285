"""CSV, TSV and JSONL tables (one row a sample), known by their suffix."""

from __future__ import annotations

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
        from fastloader.pack.sources.tables import open_table

        return open_table(src, self.name, opening.fields, opening.image, opening.label,
                          opening.root)
