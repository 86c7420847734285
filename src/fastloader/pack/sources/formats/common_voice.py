"""Common Voice: a language folder of split tables (train.tsv, dev.tsv, validated.tsv ...:
client_id, path, sentence, up_votes ...) beside a clips/ folder. A split's table is packed as
its users read it (tab-separated, no quoting: a sentence keeps its quotes): `audio` is
clips/PATH, `text` the sentence, every other column a field of its inferred kind."""

from __future__ import annotations

import csv
from pathlib import Path

from fastloader.errors import PackError
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source
from fastloader.pack.sources.types import FieldKinds, Row

CLIPS = "clips"
RENAMED = {"path": "audio", "sentence": "text"}  # Common Voice's column -> its field


def _header(table: Path) -> list[str]:
    try:
        with open(table, encoding="utf-8", errors="replace") as handle:
            return handle.readline().rstrip("\r\n").split("\t")
    except OSError:
        return []


def is_split_table(path: Path) -> bool:
    """A .tsv with path and sentence columns beside a clips/ folder."""
    return (path.suffix.lower() == ".tsv" and path.is_file() and (path.parent / CLIPS).is_dir()
            and set(RENAMED) <= set(_header(path)))


def _splits(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.tsv") if is_split_table(p))


class CommonVoice(Source):
    """A Common Voice split's .tsv (its language folder is refused, naming its splits)."""

    name = "commonvoice"
    rank = 24

    def detect(self, probe: Probe) -> bool:
        if probe.is_dir:
            return (probe.path / CLIPS).is_dir() and bool(_splits(probe.path))
        return is_split_table(probe.path)

    def open(self, src: str, opening: Opening) -> Opened:
        from fastloader.pack.sources.tables import table_samples

        if opening.image or opening.label or opening.root:
            raise PackError("image=, label= and root= do not apply to a Common Voice table: "
                            "its clips are clips/PATH, its text the sentence.")
        table = Path(src).expanduser().absolute()
        if table.is_dir():
            splits = [p.name for p in _splits(table)]
            first = "train.tsv" if "train.tsv" in splits else splits[0]
            raise PackError(f"{table} is a Common Voice language folder; pack one split's "
                            f"table: {table / first} (its splits: {', '.join(splits)}).")
        header, rows = _rows(table)
        samples, specs = table_samples(str(table), header, rows, fields_of(opening.fields),
                                       None, None, table.parent / CLIPS, True)
        return samples, specs, {"kind": self.name, "path": str(table),
                                "root": str(table.parent / CLIPS)}


def fields_of(fields: FieldKinds | None) -> dict[str, object]:
    """fields= by field name (audio, text, or another column), the clips declared audio."""
    return {"audio": "audio", **dict(fields or {})}


def _rows(table: Path) -> tuple[list[str], list[tuple[str, Row]]]:
    """(header with path -> audio and sentence -> text, [(where, row)])."""
    with open(table, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = [RENAMED.get(c, c) for c in next(reader, [])]
        rows: list[tuple[str, Row]] = []
        for cells in reader:
            where = f"{table} line {reader.line_num}"
            if not cells:
                continue
            if len(cells) != len(header):
                rows.append((where, f"malformed line: {len(cells)} cells, the header has "
                                    f"{len(header)}"))
                continue
            rows.append((where, {k: (v if v != "" else None) for k, v in zip(header, cells,
                                                                             strict=True)}))
    return header, rows


