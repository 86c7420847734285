"""Fuzz of manifest.json and the index arrays: random edits, then open, read, verify and load.

Each edit must give either the original data (records byte-exact, labels equal) or one
FastloaderError; never another exception, a crash or a hang. Index edits are re-signed in the
manifest half the time (a consistent forger), so the range checks behind the sha256 are hit.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastloader.errors import FastloaderError
from fastloader.format.open import open_dataset
from fastloader.pack.maintain.verify import verify
from fastloader.pack.pipeline.tree import pack
from treegen import make_flat_tree

CASES = 120
pytestmark = pytest.mark.timeout(300)
_ODD_VALUES: list[Any] = [None, True, False, -1, 0, 1, 7, 2**31, 2**63, -(2**63), 1.5,
                          float("nan"), "", "x", "../x", "/etc/passwd", [], {}, [[[]]], {"a": 1}]


@pytest.fixture(scope="module", params=["lmdb", "hdf5"])
def original(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes], list[int]]:
    root = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    make_flat_tree(root / "src", classes=3, per_class=4, size=24)
    dst = root / ("d.lmdb" if request.param == "lmdb" else "d.h5")
    pack(root / "src", dst, workers=1, shard_size=3000)
    with open_dataset(dst) as ds:
        records = [bytes(ds.record(i)) for i in range(len(ds))]
        labels = ds.labels.tolist()
    return dst, records, labels


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a JSON tree."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for k, value in enumerate(node):
            found += _paths(value, (*prefix, k))
    return found


def _mutate_value(rng: np.random.Generator, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and rng.random() < 0.5:
        return value + int(rng.choice([-1, 1, -4096, 4096]))
    if isinstance(value, str) and value and rng.random() < 0.5:
        chars = list(value)
        chars[int(rng.integers(len(chars)))] = chr(int(rng.integers(32, 127)))
        return "".join(chars)
    return copy.deepcopy(_ODD_VALUES[int(rng.integers(len(_ODD_VALUES)))])


def _edit_manifest(root: Path, rng: np.random.Generator) -> None:
    path = root / "manifest.json"
    data = bytearray(path.read_bytes())
    if rng.random() < 0.15 or not data:  # raw damage: flipped bytes or a cut
        if not data:
            return
        if rng.random() < 0.5:
            del data[int(rng.integers(len(data))):]
        else:
            data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(data))
        return
    try:
        raw = json.loads(data)
    except ValueError:
        return  # already damaged beyond JSON
    keys = _paths(raw)
    if not keys:
        return
    where = keys[int(rng.integers(len(keys)))]
    parent = raw
    for key in where[:-1]:
        parent = parent[key]
    if rng.random() < 0.15 and isinstance(parent, dict):
        del parent[where[-1]]
    else:
        parent[where[-1]] = _mutate_value(rng, parent[where[-1]])
    path.write_text(json.dumps(raw))


def _edit_index(root: Path, rng: np.random.Generator) -> bool:
    """Edit one index file; True when it re-signed an edit of the labels (which a forger
    who re-signs can change within range: that stays undetectable by design)."""
    try:
        raw = json.loads((root / "manifest.json").read_text())
        fields = sorted(raw["fields"])
        name = fields[int(rng.integers(len(fields)))]
        path = (root / raw["fields"][name]["file"]).resolve()
        if not path.is_relative_to(root.resolve()) or not path.is_file():
            return False  # never write outside the copy (an edit may point anywhere)
    except Exception:  # the manifest was already edited beyond use: nothing to aim at
        return False
    roll = rng.random()
    try:
        array = np.load(path, allow_pickle=False).copy()
    except Exception:  # damaged by an earlier edit: flip bytes instead
        roll = 0.5
    if roll < 0.4:  # a value changed in place, dtype and shape kept
        if array.size and array.dtype.kind in "iu":
            flat = array.reshape(-1)
            info = np.iinfo(array.dtype)
            choices = [info.min, info.max, -1, 0, 1, int(flat[0]) + 1, 999]
            flat[int(rng.integers(flat.size))] = np.asarray(
                choices[int(rng.integers(len(choices)))]).astype(array.dtype)
        np.save(path, array, allow_pickle=False)
    elif roll < 0.8 and path.stat().st_size:  # raw bytes: header or data
        data = bytearray(path.read_bytes())
        data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(data))
    else:  # cut short
        data = path.read_bytes()
        path.write_bytes(data[: int(rng.integers(len(data) + 1))])
    if rng.random() < 0.5:  # re-sign: only the range checks stand between it and a read
        raw["fields"][name]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        (root / "manifest.json").write_text(json.dumps(raw))
        return name == "label"
    return False


def _read_all(root: Path, records: list[bytes], labels: list[int] | None) -> None:
    """Read every record as the loader does (crc32 checked); what comes back must be original
    (labels=None: only in range, after a re-signed label edit)."""
    with open_dataset(root) as ds:
        ds.verify_records = True
        assert len(ds) == len(records)
        for i in range(len(ds)):
            try:
                data = bytes(ds.record(i))
            except FastloaderError:
                continue  # refused: fine
            assert data == records[i], f"record {i} returned changed bytes"
            if labels is not None:
                assert int(ds.labels[i]) == labels[i], f"record {i} returned a changed label"
            assert 0 <= int(ds.labels[i]) < len(ds.classes)
        ds.paths  # noqa: B018 - decodes every path: must not raise anything else


def _load_all(root: Path, labels: list[int]) -> None:
    import fastloader

    with fastloader.FastLoader(root, batch_size=4, device="cpu", num_threads=1,
                               transforms=[fastloader.Resize((8, 8))]) as loader:
        got = [int(v) for _, batch in loader for v in batch]
    assert got == labels


@pytest.mark.heavy
def test_random_edits_give_original_data_or_one_fastloader_error(
    original: tuple[Path, list[bytes], list[int]], tmp_path: Path
) -> None:
    source, records, labels = original
    rng = np.random.default_rng(15)
    outcomes = {"worked": 0, "refused": 0}
    for case in range(CASES):
        root = tmp_path / f"case{case}{source.suffix}"
        shutil.copytree(source, root)
        forged = False
        for _ in range(int(rng.integers(1, 3))):
            if rng.random() < 0.5:
                _edit_manifest(root, rng)
            else:
                forged |= _edit_index(root, rng)
        try:
            _read_all(root, records, None if forged else labels)
            if case % 10 == 0 and not forged:
                _load_all(root, labels)
            outcomes["worked"] += 1
        except FastloaderError:
            outcomes["refused"] += 1
        with contextlib.suppress(FastloaderError):  # a report or one FastloaderError
            verify(root, decode=case % 4 == 0)
        shutil.rmtree(root)
    assert outcomes["refused"] > CASES // 4 and outcomes["worked"] > 0, outcomes
