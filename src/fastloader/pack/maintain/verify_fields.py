"""verify() of a v2 dataset's field columns: every value of every field is read back.

The column arrays' files and sha256 are checked with the other index files, and their ranges
at open (format/columns.py); here each value of a kind that is `verified` (format/kinds/) is
read back and checked by its kind: each text value must be UTF-8, each json value parse, each
mask decode to its image's height and width, and with decode=True each further image field
must decode.
"""

from __future__ import annotations

from typing import Protocol

from fastloader.errors import FastloaderError
from fastloader.format.dataset import PackedDataset

_SHOWN = 20  # problems listed per field; all are counted in bad_records


class Report(Protocol):
    """What check_fields adds its problems to (verify.VerifyReport)."""

    problems: list[str]
    bad_records: list[int]


def check_fields(ds: PackedDataset, report: Report, decode: bool) -> int:
    """Read every text, json, mask and further image value; add problems to report; return how
    many were read (numeric columns were range-checked when the dataset opened)."""
    if ds.columns is None:
        return 0
    read = 0
    for name, spec in ds.fields.items():
        if name == ds.image_field or not spec.kind.verified:
            continue
        bad = 0
        for i in range(len(ds)):
            problem = _value_problem(ds, name, i, decode)
            read += 1
            if problem is None:
                continue
            bad += 1
            report.bad_records.append(i)
            if bad <= _SHOWN:
                report.problems.append(f"record {i}: field {name!r}: {problem}")
    return read


def _decodes(data: bytes) -> str | None:
    """Why data does not decode as an image, or None."""
    from fastloader.pack.sources.validate import prepare_data

    checked = prepare_data(data)
    return None if checked.data is not None else checked.error


def _value_problem(ds: PackedDataset, name: str, i: int, decode: bool) -> str | None:
    try:
        value = ds.value(name, i)
        height, width = (int(v) for v in ds.stored_shapes[i])  # the record's own pixels
        spec = ds.fields[name]
        return spec.kind.verify(spec, value, (height, width), _decodes if decode else None)
    except FastloaderError as exc:
        return str(exc)
