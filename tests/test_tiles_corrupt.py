"""Corrupt tile tables, truncated and mutated records give clear errors, never a crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fastloader.decode import tiles
from fastloader.errors import CorruptRecordError, InvalidArgumentError, InvalidTypeError
from imagegen import encode, photo_like

pytestmark = [pytest.mark.native, pytest.mark.wheel]

CROP = (10, 20, 30, 40)


@pytest.fixture(scope="module")
def record() -> tiles.TiledRecord:
    result = tiles.repack(encode(photo_like(64, 96, 11), quality=90))
    assert result is not None
    return result


def with_header(table: tiles.TileTable, **changes: int) -> tuple[np.ndarray, np.ndarray]:
    header, offsets = table.to_arrays()
    for name, value in changes.items():
        header[tiles.HEADER_FIELDS.index(name)] = value
    return header, offsets


@pytest.mark.parametrize(
    "changes",
    [
        {"width": 97},
        {"mcu_width": 8},
        {"restart_mcus": 5},
        {"mcu_rows": 3},
        {"scan_offset": 7},
        {"height": 0},
        {"restart_mcus": -1},
        {"width": 2**40},
    ],
)
def test_inconsistent_headers_are_rejected(record: tiles.TiledRecord, changes: dict) -> None:
    with pytest.raises(CorruptRecordError, match="tile table"):
        tiles.TileTable.from_arrays(*with_header(record.table, **changes))


def test_bad_array_shapes_are_rejected(record: tiles.TiledRecord) -> None:
    header, offsets = record.table.to_arrays()
    with pytest.raises(CorruptRecordError, match="9 integers"):
        tiles.TileTable.from_arrays(header[:5], offsets)
    with pytest.raises(CorruptRecordError, match="uint32"):
        tiles.TileTable.from_arrays(header, offsets.astype(np.int64))


def table_with_offsets(table: tiles.TileTable, offsets: np.ndarray) -> tiles.TileTable:
    """A table whose header passes the cheap checks but whose offsets lie (as from a bad index)."""
    values = {name: getattr(table, name) for name in tiles.HEADER_FIELDS}
    return tiles.TileTable(**values, offsets=offsets.astype(np.uint32))


@pytest.mark.parametrize("lie", ["shifted", "reversed", "past_end", "zeros"])
def test_lying_offsets_are_caught_by_the_splice(record: tiles.TiledRecord, lie: str) -> None:
    offsets = record.table.offsets.astype(np.int64)
    lies = {
        "shifted": np.concatenate([offsets[:1], offsets[1:-1] + 1, offsets[-1:]]),
        "reversed": np.concatenate([offsets[:1], offsets[-2:0:-1], offsets[-1:]]),
        "past_end": np.concatenate([offsets[:-1], [len(record.data) + 100]]),
        "zeros": np.concatenate([offsets[:1], np.zeros(offsets.size - 1, np.int64)]),
    }
    assert not np.array_equal(lies[lie], offsets)  # the table really lies
    table = table_with_offsets(record.table, lies[lie])
    with pytest.raises(CorruptRecordError):
        tiles.splice(record.data, table, (0, 0, record.table.height, record.table.width))


def test_truncated_and_foreign_records_are_rejected(record: tiles.TiledRecord) -> None:
    for cut in (0, 3, 100, len(record.data) // 2, len(record.data) - 1):
        with pytest.raises(CorruptRecordError):
            tiles.splice(record.data[:cut], record.table, CROP)
    other = tiles.repack(encode(photo_like(64, 96, 12), quality=70))
    assert other is not None
    with pytest.raises(CorruptRecordError):
        tiles.splice(other.data, record.table, (0, 0, 64, 96))
    with pytest.raises(CorruptRecordError, match="not a valid tiled record"):
        tiles.scan(encode(photo_like(64, 96, 12), quality=70))  # no restart markers


def test_bad_crops_and_types_are_argument_errors(record: tiles.TiledRecord) -> None:
    for crop in [(0, 0, 0, 5), (-1, 0, 5, 5), (0, 90, 5, 10), (60, 0, 5, 5), (0, 0, 2**62, 1)]:
        with pytest.raises(InvalidArgumentError, match="crop"):
            tiles.splice(record.data, record.table, crop)
    with pytest.raises(InvalidTypeError):
        tiles.splice(record.data, record.table, (1, 2, 3))
    with pytest.raises(InvalidTypeError):
        tiles.repack("not bytes")
    with pytest.raises(InvalidArgumentError, match="restart_mcus"):
        tiles.repack(record.data, restart_mcus=0)
    small = np.empty(10, np.uint8)
    with pytest.raises(InvalidArgumentError, match="out"):
        tiles.splice_into(record.data, record.table, CROP, small)


FUZZ = textwrap.dedent(
    """
    import sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from imagegen import encode, photo_like
    from fastloader.decode import tiles
    from fastloader.errors import FastloaderError

    rng = np.random.default_rng(0)
    source = encode(photo_like(48, 80, 3), quality=85)
    record = tiles.repack(source)
    data = np.frombuffer(record.data, np.uint8)
    outcomes = {{"ok": 0, "error": 0}}
    for i in range({count}):
        mutated = data.copy()
        for _ in range(int(rng.integers(1, 6))):
            mutated[rng.integers(0, mutated.size)] = rng.integers(0, 256)
        if i % 3 == 0:
            mutated = mutated[: rng.integers(0, mutated.size)]
        offsets = record.table.offsets.copy()
        if i % 5 == 0:
            offsets[rng.integers(0, offsets.size)] = rng.integers(0, 2**32, dtype=np.uint64)
        values = {{n: getattr(record.table, n) for n in tiles.HEADER_FIELDS}}
        table = tiles.TileTable(**values, offsets=offsets)
        top, left = int(rng.integers(0, 40)), int(rng.integers(0, 70))
        for step in ("splice", "decode", "repack_source", "repack_record"):
            try:
                if step == "splice":
                    tiles.splice(mutated, table, (top, left, 8, 10))
                elif step == "decode":
                    tiles.decode_crop(mutated, table, (top, left, 8, 10))
                elif step == "repack_source":
                    src = np.frombuffer(source, np.uint8).copy()
                    src[rng.integers(0, src.size)] ^= 0xFF
                    tiles.repack(src)
                else:
                    tiles.repack(mutated)
                outcomes["ok"] += 1
            except FastloaderError:
                outcomes["error"] += 1
    print(outcomes["ok"], outcomes["error"])
    """
)


def test_mutated_records_never_crash() -> None:
    tests = str(Path(__file__).parent)
    script = FUZZ.format(tests=tests, count=300)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ok, errors = (int(v) for v in done.stdout.split())
    assert ok + errors == 1200
    assert errors > 0  # mutations were really seen as corrupt somewhere
