"""Datasets in S3 (moto's standalone server on 127.0.0.1): packdata to s3:// and back, and
FastLoader reading from a cold cache smaller than the dataset, resumable mid-epoch."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from fastloader.format.open import open_dataset
from fastloader.loader.loader import FastLoader
from fastloader.pack.cli.main import main as packdata
from helpers import train_transforms
from imagegen import make_tree
from servers import s3_server

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
URL = "s3://bucket/train.lmdb"


pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("s3tree") / "tree"
    make_tree(root, classes=4, per_class=10)
    return root


@pytest.fixture()
def s3(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    """An S3 server holding URL, packed with `packdata tree s3://...` (6+ shards)."""
    monkeypatch.setenv("FASTLOADER_CACHE_DIR", str(tmp_path / "cache"))  # never ~/.cache
    with s3_server(monkeypatch):
        import s3fs

        s3fs.S3FileSystem().mkdir("bucket")
        code = packdata([str(tree), URL, "--shard-size", "12K", "--workers", "1", "--quiet",
                         "--staging", str(tmp_path / "staging")])
        assert code == 0, capsys.readouterr().err
        assert not any((tmp_path / "staging").rglob("manifest.json"))  # staging removed
        yield tmp_path


def test_packdata_to_s3_and_back_verifies(s3: Path, tree: Path, capsys) -> None:
    assert packdata(["verify", URL]) == 0
    assert f"OK: {URL}: 40 records checked" in capsys.readouterr().out
    assert packdata(["info", URL, "--json"]) == 0
    assert '"records": 40' in capsys.readouterr().out
    code = packdata([str(tree), URL, "--workers", "1", "--quiet",  # no silent replacement
                     "--staging", str(s3 / "staging-again")])
    assert code == 2 and "--overwrite" in capsys.readouterr().err
    import s3fs

    fs = s3fs.S3FileSystem()
    shard = sorted(p for p in fs.ls(URL[5:]) if p.endswith(".mdb"))[0]
    data = bytearray(fs.cat_file(shard))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(shard, bytes(data))
    assert packdata(["verify", URL]) != 0  # a damaged remote shard is found


def loader(cache: Path, limit: int | str, **kw):
    return FastLoader(URL, batch_size=4, transforms=train_transforms(), num_threads=1,
                      cache_dir=cache, cache_limit=limit, prefetch_shards=1, **kw)


def smallest_limit(cache: Path, window: int) -> int:
    try:
        loader(cache, 1, shuffle=True, shuffle_window=window)
    except Exception as exc:  # the error names the smallest limit that works
        return int(str(exc).split("cache_limit >= ")[1].split()[0])
    raise AssertionError("a 1-byte cache_limit was accepted")


def test_every_sample_once_per_epoch_from_a_cold_cache_under_its_limit(s3: Path) -> None:
    cache = s3 / "cache"
    limit = smallest_limit(cache, window=2)
    with open_dataset(URL, cache_dir=s3 / "probe") as ds:
        total = sum(s.bytes for s in ds.manifest.shards)
        labels = ds.labels.copy()
    assert limit < total  # the cache cannot hold the dataset
    seen_over: list[int] = []
    stop = threading.Event()
    ld = loader(cache, limit, shuffle=True, shuffle_window=2)

    def watch() -> None:  # the bytes in the cache, sampled while the loader runs
        while not stop.is_set():
            used = ld.dataset.cache.usage()
            if used > limit:
                seen_over.append(used)
            stop.wait(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for epoch in range(2):
            got = []
            for _, y in ld:
                got += y.tolist()
                assert ld.dataset.cache.usage() <= limit
            assert sorted(got) == sorted(labels.tolist()), f"epoch {epoch}"
    finally:
        stop.set()
        watcher.join()
        ld.close()
    assert not seen_over
    assert ld.dataset.cache.downloads > len(ld.dataset.manifest.shards)  # evicted, refetched


def test_resume_mid_epoch_from_s3(s3: Path) -> None:
    first = loader(s3 / "cache", "10MB", shuffle=True, shuffle_window=2, seed=3)
    full = [x.clone() for x, _ in first]
    first.set_epoch(0)  # the same epoch again, cut after 4 batches
    it = iter(first)
    for _ in range(4):
        next(it)
    state = first.state_dict()
    first.close()
    second = loader(s3 / "cache", "10MB", shuffle=True, shuffle_window=2, seed=3)
    second.load_state_dict(state)
    rest = [x.clone() for x, _ in second]
    second.close()
    assert len(rest) == len(full) - 4
    assert all(torch.equal(a, b) for a, b in zip(rest, full[4:], strict=True))
