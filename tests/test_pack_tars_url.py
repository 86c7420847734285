"""WebDataset .tar shards at an S3 URL (moto's server on 127.0.0.1, credentials from the
environment): the same dataset as the same tars packed locally (fastloader.pack and packdata
with a brace pattern), a missing shard named, a truncated object giving the local error
sample, the samples surviving pickle and fork, and the header walk's few requests."""

from __future__ import annotations

import io
import logging
import os
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

import fastloader
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from fastloader.pack.sources.groups import open_tars, split_key
from fastloader.pack.sources.importers import fingerprint, open_source
from fastloader.pack.sources.tar_index import TarIndex
from helpers import dataset_bytes, run_in_fork
from imagegen import encode, photo_like

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
PATTERN = "data-{000..002}.tar"
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}  # a loopback instance


pytestmark = pytest.mark.heavy


def write_tar(path: Path, start: int, n: int) -> Path:
    """n groups of a JPEG, a class and a text."""
    with tarfile.open(path, "w") as tar:
        for k in range(start, start + n):
            for ext, data in (("jpg", encode(photo_like(12 + k % 3, 16, k))),
                              ("cls", b"%d\n" % (k % 3)), ("txt", b"text %d" % k)):
                info = tarfile.TarInfo(f"shard/s{k:05d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tars")
    for t in range(3):
        write_tar(folder / f"data-{t:03d}.tar", 4 * t, 4)
    return folder


def upload(fs: Any, folder: Path, names: list[str] | None = None) -> None:
    for path in sorted(folder.glob("*.tar")):
        if names is None or path.name in names:
            fs.put_file(str(path), f"bucket/{path.name}")


def same_dataset(dst: Path) -> dict[str, Any]:
    """dataset_bytes without the source's description (a path and its files' stamps here, a
    URL and its objects' ETags there)."""
    found = dataset_bytes(dst)
    assert set(found["manifest.json"]["options"].pop("source")) == {"kind", "path",
                                                                   "fingerprint"}
    return found


@pytest.mark.native_neutral
def test_tars_at_s3_pack_as_the_local_tars(s3: Any, tars: Path, tmp_path: Path) -> None:
    upload(s3, tars)
    local = fastloader.pack(str(tars / PATTERN), tmp_path / "local.lmdb", workers=2)
    remote = fastloader.pack(f"s3://bucket/{PATTERN}", tmp_path / "remote.lmdb", workers=2)
    assert local.num_samples == remote.num_samples == 12
    assert same_dataset(tmp_path / "remote.lmdb") == same_dataset(tmp_path / "local.lmdb")
    assert main([f"s3://bucket/{PATTERN}", str(tmp_path / "cli.lmdb"), "--quiet",
                 "--workers", "2"]) == 0
    assert same_dataset(tmp_path / "cli.lmdb") == same_dataset(tmp_path / "local.lmdb")


@pytest.mark.native_neutral
def test_a_missing_shard_is_named(s3: Any, tars: Path, tmp_path: Path) -> None:
    upload(s3, tars, ["data-000.tar", "data-002.tar"])
    with pytest.raises(PackError, match=r"s3://bucket/data-001.tar: no such tar shard \(1 of "
                       r"3 named by 's3://bucket/data-\{000..002\}.tar' are missing"):
        fastloader.pack(f"s3://bucket/{PATTERN}", tmp_path / "o.lmdb")
    assert not (tmp_path / "o.lmdb").exists()


def test_a_truncated_object_gives_the_local_error_sample(s3: Any, tmp_path: Path) -> None:
    cut = write_tar(tmp_path / "cut.tar", 0, 4)
    with tarfile.open(cut) as tar:
        at = tar.getmember("shard/s00002.cls").offset_data
    cut.write_bytes(cut.read_bytes()[:at + 1])  # inside group 2's .cls data
    upload(s3, tmp_path)
    reasons = []
    for src in (str(cut), "s3://bucket/cut.tar"):
        manifest = fastloader.pack(src, tmp_path / f"{len(reasons)}.lmdb", workers=1,
                                   skip_bad=True)
        assert manifest.num_samples == 2
        reasons.append([(s["sample"].replace(src, "SRC"), s["reason"].replace(src, "SRC"))
                        for s in manifest.stats["skipped_samples"]])
    assert reasons[0] == reasons[1] == [("SRC", f"SRC: truncated at byte {at + 1}: member "
                                         f"'shard/s00002.cls' needs bytes {at}..{at + 2}")]


@pytest.mark.native_neutral
def test_url_samples_survive_pickle_and_fork(s3: Any, tars: Path) -> None:
    upload(s3, tars)
    samples = open_tars(f"s3://bucket/{PATTERN}", None)[0]
    in_order = list(samples)  # this process's file system is made now
    assert in_order[5]["jpg"] == (tars / "data-001.tar").read_bytes()[
        samples.tar_index.offset[15]:][:samples.tar_index.size[15]]
    pickled = pickle.dumps(samples)
    assert b"s3fs" not in pickled and pickle.loads(pickled).tar_index._block is None
    assert list(pickle.loads(pickled)) == in_order  # no file system, no read-ahead block

    def child() -> int:
        return 0 if list(reversed(samples)) == in_order[::-1] else 1

    assert run_in_fork(child) == (0, "")
    assert list(samples) == in_order  # the parent's file system still works


@pytest.mark.native_neutral
def test_the_header_walk_reads_ahead(s3: Any, tmp_path: Path,
                                     caplog: pytest.LogCaptureFixture) -> None:
    """900 headers of a small tar come in one GET (moto's server logs each request), not one
    request per 512-byte header; reading its groups in order (as a shard task does) one more."""
    with tarfile.open(tmp_path / "many.tar", "w") as tar:
        for k in range(900):
            info = tarfile.TarInfo(f"s{k // 3:05d}.{('jpg', 'cls', 'txt')[k % 3]}")
            info.size = 100
            tar.addfile(info, io.BytesIO(bytes(100)))
    upload(s3, tmp_path)
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    index = TarIndex(["s3://bucket/many.tar"], split_key)
    requests = [r.getMessage() for r in caplog.records if "/bucket/many.tar" in r.getMessage()]
    assert len(index) == 300 and index.members(299)[2][1:] == (
        (tmp_path / "many.tar").read_bytes().index(b"s00299.txt") + 512, 100)
    assert sum("GET /bucket/many.tar" in r for r in requests) == 1, requests
    caplog.clear()
    data = [index.read(0, offset, size) for k in range(300) for _, offset, size in
            index.members(k)]
    assert data == [bytes(100)] * 900
    assert sum("GET /bucket/many.tar" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.native_neutral
def test_packdata_engine_ray_reopens_the_url_tars_in_its_tasks(s3: Any, tars: Path,
                                                               tmp_path: Path) -> None:
    """The issue's command: each Ray task opens the tars again from the plan's description
    (the URL; credentials from the environment its workers inherit)."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'fastloader[ray]')")
    upload(s3, tars)
    argv = [f"s3://bucket/{PATTERN}", str(tmp_path / "ray.lmdb"), "--engine", "ray",
            "--workers", "2", "--shard-size", "4K", "--quiet"]
    ran = subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", *argv],
                         env={**os.environ, **RAY_ENV}, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr
    local = fastloader.pack(str(tars / PATTERN), tmp_path / "local.lmdb", shard_size=4 << 10)
    assert len(local.shards) >= 3
    assert same_dataset(tmp_path / "ray.lmdb") == same_dataset(tmp_path / "local.lmdb")


@pytest.mark.native_neutral
def test_storage_options_reach_the_walk_the_reads_and_the_fingerprint(
        s3: Any, tars: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    upload(s3, tars)
    url = f"s3://bucket/{PATTERN}"
    expected = list(open_tars(url, None)[0])
    options = {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "key": "testing",
               "secret": "testing"}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the environment's: wrong
    s3.clear_instance_cache()
    samples, _, source = open_source(url, "tar", fields=None, image=None, label=None,
                                     root=None, storage_options=options)
    assert list(samples) == expected
    assert run_in_fork(lambda: 0 if samples[11] == expected[11] else 1) == (0, "")
    assert source["fingerprint"] == fingerprint("tar", url, options)


@pytest.mark.native_neutral
def test_the_fingerprint_follows_each_objects_etag(s3: Any, tars: Path) -> None:
    """What --resume and the Ray tasks compare: a tar rewritten with its size unchanged."""
    upload(s3, tars)
    url = f"s3://bucket/{PATTERN}"
    before = fingerprint("tar", url)
    assert fingerprint("tar", url) == before
    data = bytearray((tars / "data-001.tar").read_bytes())
    data[-1] ^= 1  # the end-of-archive padding: the same tar, another object
    s3.pipe_file("bucket/data-001.tar", bytes(data))
    assert fingerprint("tar", url) != before


@pytest.mark.native_neutral
def test_pack_takes_storage_options_for_url_tars(
        s3: Any, tars: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # fastloader.pack passes them to the importer (walk, reads in the forked workers,
    # fingerprint): the environment's endpoint points nowhere
    upload(s3, tars)
    fastloader.pack(str(tars / PATTERN), tmp_path / "local.lmdb", workers=2)
    options = {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "key": "testing",
               "secret": "testing"}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    s3.clear_instance_cache()
    fastloader.pack(f"s3://bucket/{PATTERN}", tmp_path / "remote.lmdb", workers=2,
                    storage_options=options)
    assert same_dataset(tmp_path / "remote.lmdb") == same_dataset(tmp_path / "local.lmdb")


def test_a_gzipped_tar_at_a_url_is_refused_saying_why(s3: Any, tmp_path: Path) -> None:
    import gzip

    plain = write_tar(tmp_path / "a.tar", 0, 2)
    (tmp_path / "a.tgz").write_bytes(gzip.compress(plain.read_bytes()))
    s3.put_file(str(tmp_path / "a.tgz"), "bucket/a.tgz")
    with pytest.raises(PackError, match=r"s3://bucket/a.tgz is a gzip-compressed tar: its "
                       "members have no byte offsets a ranged request can read"):
        fastloader.pack("s3://bucket/a.tgz", tmp_path / "o.lmdb", workers=1)
    assert fastloader.pack(tmp_path / "a.tgz", tmp_path / "o.lmdb", workers=1).num_samples == 2
