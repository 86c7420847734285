"""How a Parquet table's image cells are read: located byte ranges of plain columns (one pread
each, checked), row groups decoded by pyarrow otherwise, one worker per row group."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import fastloader
from fastloader.format.open import open_dataset
from fastloader.pack.engines import local
from fastloader.pack.sources import hf_parquet, values
from fastloader.pack.sources.parquet_pages import value_ranges

pa = pytest.importorskip("pyarrow", reason="pyarrow is a test dependency")
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is a test dependency")

STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


pytestmark = pytest.mark.native_neutral


def png(k: int) -> bytes:
    array = np.random.default_rng(k).integers(0, 256, (6 + k % 5, 9, 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def mixed_table(n: int = 300) -> Any:
    """A binary column with nulls and a {bytes, path} struct column with null structs and
    null bytes, values of every length from 0 up."""
    rng = random.Random(5)
    blobs = [None if k % 7 == 3 else rng.randbytes(k % 61) for k in range(n)]
    structs = [None if k % 11 == 0 else {"bytes": None if k % 5 == 0 else rng.randbytes(k % 23),
                                         "path": f"p{k}"} for k in range(n)]
    return pa.table({"blob": pa.array(blobs, pa.binary()), "image": pa.array(structs, STRUCT)})


def leaf(handle: Any, path: str) -> int:
    return [handle.schema.column(j).path for j in range(len(handle.schema))].index(path)


def check_ranges(path: Path, column: str, field: str | None) -> int:
    """Every row's located range holds pyarrow's value (None where the value is null); the
    number of row groups located."""
    handle = pq.ParquetFile(path)
    data = path.read_bytes()
    located = 0
    for group in range(handle.metadata.num_row_groups):
        ranges = value_ranges(str(path), handle.metadata, handle.schema, group,
                              leaf(handle, f"{column}.{field}" if field else column))
        if ranges is None:
            continue
        located += 1
        cells = handle.read_row_group(group, columns=[column]).column(0).combine_chunks()
        cells = cells.field(field) if field else cells
        assert len(ranges) == len(cells)
        for k, where in enumerate(ranges):
            value = cells[k].as_py()
            assert (where is None) == (value is None)
            if where is not None:
                assert data[where[0]:where[0] + where[1]] == value
    return located


PLAIN_LAYOUTS = [
    {},  # one v1 page per column chunk
    {"data_page_size": 400},  # many pages
    {"data_page_version": "2.0", "data_page_size": 300},
    {"row_group_size": 70, "write_statistics": False},
    {"row_group_size": 64, "data_page_version": "2.0"},
]


@pytest.mark.parametrize("options", PLAIN_LAYOUTS)
def test_value_ranges_of_plain_columns_hold_pyarrows_values(tmp_path: Path,
                                                            options: dict[str, Any]) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(mixed_table(), path, compression="none", use_dictionary=False, **options)
    groups = pq.ParquetFile(path).metadata.num_row_groups
    assert check_ranges(path, "blob", None) == groups
    assert check_ranges(path, "image", "bytes") == groups


@pytest.mark.parametrize("options", [{"compression": "snappy", "use_dictionary": False},
                                     {"compression": "none", "use_dictionary": True}])
def test_compressed_or_dictionary_columns_are_not_located(tmp_path: Path,
                                                          options: dict[str, Any]) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(mixed_table(), path, **options)
    assert check_ranges(path, "blob", None) == 0
    assert check_ranges(path, "image", "bytes") == 0


def test_damaged_page_headers_are_never_read_out_of_bounds(tmp_path: Path) -> None:
    """Mutated bytes around the first pages give no range (pyarrow reads, and refuses, the
    file then) or ranges inside the file; nothing raises."""
    path = tmp_path / "t.parquet"
    pq.write_table(mixed_table(120), path, compression="none", use_dictionary=False,
                   data_page_size=200)
    original = bytearray(path.read_bytes())
    handle = pq.ParquetFile(path)
    column = leaf(handle, "blob")
    start = handle.metadata.row_group(0).column(column).data_page_offset
    rng = random.Random(9)
    outcomes = set()
    for _ in range(300):
        damaged = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            damaged[start + rng.randrange(400)] = rng.randrange(256)
        path.write_bytes(damaged)
        ranges = value_ranges(str(path), handle.metadata, handle.schema, 0, column)
        outcomes.add(ranges is None)
        for where in ranges or []:
            assert where is None or (where[0] >= start and where[0] + where[1] <= len(damaged))
    assert outcomes == {True, False}  # some damage is in value bytes, some in headers


def datasets_file(path: Path, n: int = 40) -> list[bytes]:
    datasets = pytest.importorskip("datasets", reason="datasets is a test dependency")
    images = [png(k) for k in range(n)]
    features = datasets.Features({"image": datasets.Image(), "n": datasets.Value("int64")})
    datasets.Dataset.from_dict({"image": [{"bytes": b, "path": f"{k}.png"} for k, b in
                                          enumerate(images)], "n": list(range(n))},
                               features=features).to_parquet(path)
    return images


def stored(dst: Path) -> list[bytes]:
    with open_dataset(dst) as ds:
        return [ds.sample(k)["image"] for k in range(len(ds))]


def test_cells_of_a_datasets_file_are_read_by_range_without_pyarrow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images = datasets_file(tmp_path / "t.parquet")

    def no_row_groups(cell: Any) -> Any:
        raise AssertionError("a located cell was read through pyarrow")

    monkeypatch.setattr(values, "_row_group", no_row_groups)
    for workers in (1, 2):
        fastloader.pack(tmp_path / "t.parquet", tmp_path / f"o{workers}.lmdb", workers=workers)
        assert stored(tmp_path / f"o{workers}.lmdb") == images


def test_a_located_cell_of_a_file_changed_since_planning_is_refused(tmp_path: Path) -> None:
    datasets_file(tmp_path / "t.parquet", 4)
    table = hf_parquet.open_table(tmp_path / "t.parquet")
    rows = hf_parquet.read_rows(table, {"image"}, tmp_path)
    cell = rows[2][1]["image"]
    assert cell.offset > 0 and values.read_cell(cell) == png(2)
    info = os.stat(tmp_path / "t.parquet")
    os.utime(tmp_path / "t.parquet", ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    with pytest.raises(OSError, match="changed since the pack read its rows"):
        values.read_cell(cell)


def test_each_row_group_read_through_pyarrow_is_decoded_by_one_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compressed column's cells travel as runs of one row group, so no group is decoded by
    two workers (nor twice by one)."""
    images = [png(k) for k in range(180)]
    pq.write_table(pa.table({"image": pa.array(images, pa.binary())}), tmp_path / "t.parquet",
                   compression="snappy", row_group_size=60)
    log = tmp_path / "reads.log"
    read = values._row_group

    def logged(cell: Any) -> Any:
        before = values._LAST.get("key")
        group = read(cell)
        if values._LAST.get("key") != before:  # this call decoded its row group
            with open(log, "a") as out:
                out.write(f"{os.getpid()} {cell.row_group}\n")
        return group

    monkeypatch.setattr(values, "_row_group", logged)
    fastloader.pack(tmp_path / "t.parquet", tmp_path / "o.lmdb", workers=2)
    assert stored(tmp_path / "o.lmdb") == images
    reads = [line.split() for line in log.read_text().splitlines()]
    assert sorted(group for _, group in reads) == ["0", "1", "2"]


def test_runs_keep_one_locality_within_their_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    class Items:
        def work(self, i: int) -> int:
            return i

        def size(self, i: int) -> int:
            return 10

    keys = [0] * 5 + [1] * 3 + [2] * 7
    monkeypatch.setattr(local, "_RUN_ITEMS", 4)
    runs = list(local._runs(Items(), range(len(keys)), keys.__getitem__))  # type: ignore[arg-type]
    assert [run for run, _ in runs] == [[0, 1, 2, 3], [4], [5, 6, 7], [8, 9, 10, 11],
                                       [12, 13, 14]]
    assert [size for _, size in runs] == [40, 10, 30, 40, 30]
