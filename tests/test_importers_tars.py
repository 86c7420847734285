"""WebDataset .tar shards as an indexed sequence: any order equals tar order, it survives pickle
and fork, its index stays compact, and damaged tars and split groups read as they always did."""

from __future__ import annotations

import io
import os
import pickle
import random
import tarfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from fastloader.pack.sources.groups import TarSamples, open_tars
from fastloader.pack.sources.values import ERROR_KEY, PATH_KEY, WHERE_KEY, TarMember
from helpers import run_in_fork

pytestmark = pytest.mark.native_neutral


def write_members(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def group_members(start: int, n: int) -> list[tuple[str, bytes]]:
    """n groups of a (fake) image, a class and a text; images are not decoded by the
    sequence."""
    return [member for k in range(start, start + n) for member in (
        (f"d/s{k:05d}.JPG", b"jpeg %d" % k), (f"d/s{k:05d}.cls", b"%d\n" % (k % 3)),
        (f"d/s{k:05d}.txt", b"text %d" % k))]


def expected(paths: list[Path]) -> list[dict[str, object]]:
    """The samples of well-formed tars of group_members, from tarfile's own member list."""
    out: list[dict[str, object]] = []
    for path in paths:
        with tarfile.open(path) as tar:
            for info in tar.getmembers():
                key, _, ext = info.name.partition(".")
                if ext == "JPG":
                    out.append({WHERE_KEY: f"{path} member {key}", PATH_KEY: key,
                                "jpg": TarMember(str(path), info.offset_data, info.size,
                                                 info.name)})
                else:
                    data = tar.extractfile(info).read()  # type: ignore[union-attr]
                    out[-1][ext] = int(data) if ext == "cls" else data.decode()
    return out


@pytest.fixture()
def two_tars(tmp_path: Path) -> tuple[str, list[Path]]:
    paths = [write_members(tmp_path / f"t-{t}.tar", group_members(5 * t, 5)) for t in (0, 1)]
    return str(tmp_path / "t-{0..1}.tar"), paths


def test_any_order_equals_tar_order(two_tars: tuple[str, list[Path]]) -> None:
    pattern, paths = two_tars
    samples, specs, _ = open_tars(pattern, None)
    assert [s.name for s in specs] == ["jpg", "cls", "txt"]
    in_order = list(samples)
    assert in_order == expected(paths) and len(samples) == 10
    order = list(range(len(samples)))
    random.Random(0).shuffle(order)
    assert {k: samples[k] for k in order} == dict(enumerate(in_order))
    assert samples[-1] == in_order[-1]
    with pytest.raises(IndexError):
        samples[10]
    assert samples.size_hints().tolist() == [
        len(b"jpeg %d" % k) + len(b"%d\n" % (k % 3)) + len(b"text %d" % k) for k in range(10)]


def test_pickle_and_fork(two_tars: tuple[str, list[Path]]) -> None:
    samples = open_tars(two_tars[0], None)[0]
    in_order = list(samples)  # the parent has its descriptors open now
    assert list(pickle.loads(pickle.dumps(samples))) == in_order
    parent_fds = set(samples.tar_index._fds.values())
    assert parent_fds

    def child() -> int:
        for fd in parent_fds:  # a child that closes what it inherited still reads
            os.close(fd)
        return 0 if list(reversed(samples)) == in_order[::-1] else 1

    assert run_in_fork(child) == (0, "")
    assert list(samples) == in_order  # and the parent's descriptors are untouched


@pytest.mark.heavy
def test_the_index_is_compact(tmp_path: Path) -> None:
    n = 20_000
    members = [(f"s{k:06d}.{ext}", b"1") for k in range(n) for ext in ("jpg", "cls")]
    path = write_members(tmp_path / "big.tar", members)
    tracemalloc.start()
    try:
        samples = open_tars(str(path), None)[0]
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < n * 100  # the driver holds the index only (67 bytes a group here)
    assert len(samples) == n and samples[n - 1][PATH_KEY] == f"s{n - 1:06d}"
    # per group: tar 4 + key 7 + 2 offsets 16; per member: ext code 4 + offset 8 + size 8
    assert samples.tar_index.nbytes() <= n * (4 + 7 + 16 + 2 * 20) + 64
    assert len(pickle.dumps(samples)) < n * 80  # nothing else per sample travels


def test_damaged_tar_and_split_groups(tmp_path: Path) -> None:
    cut = write_members(tmp_path / "a.tar", group_members(0, 4))
    before = expected([cut])
    with tarfile.open(cut) as tar:
        at = tar.getmember("d/s00002.cls").offset_data
    cut.write_bytes(cut.read_bytes()[:at + 1])  # inside group 2's .cls data
    write_members(tmp_path / "b.tar", [
        ("d/k.jpg", b"1"), ("d/k.cls", b"0"), ("d/.hidden.cls", b"x"), ("d/m.jpg", b"2"),
        ("d/m.cls", b"1"), ("d/k.txt", b"later")])
    tarfile.open(tmp_path / "c.tar", "w").close()  # empty: no groups, no error
    samples = open_tars(str(tmp_path / "{a,b,c}.tar"), None)[0]
    got = list(samples)
    assert got[:2] == before[:2]  # the group in progress at the damage is dropped
    assert got[2] == {WHERE_KEY: str(cut), ERROR_KEY: (
        f"truncated at byte {at + 1}: member 'd/s00002.cls' needs bytes {at}..{at + 2}")}
    assert [(s[PATH_KEY], s.get("cls"), s.get("txt")) for s in got[3:]] == [
        ("d/k", 0, None), ("d/m", 1, None), ("d/k", None, "later")]  # consecutive runs
    assert samples.size_hints().tolist()[:4] == [14, 14, 0, 2]
    assert isinstance(samples, TarSamples) and np.all(samples.tar_index.group_tar == [0, 0, 0, 1,
                                                                                  1, 1])
