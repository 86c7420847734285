"""Remote datasets through the verified shard cache, against a real HTTP server on 127.0.0.1:
one download per shard per node, downloads killed mid-way, corrupted and changed files,
retries, and the cache limit."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastloader.errors import DatasetError, FastloaderError, InvalidArgumentError
from fastloader.format.open import open_dataset
from fastloader.format.remote import HashMismatchError
from helpers import packed_tree

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's http://) is not installed")

TESTS = Path(__file__).parent



pytestmark = pytest.mark.heavy


def all_records(ds) -> list[bytes]:
    return [bytes(ds.record(i)) for i in range(len(ds))]


def shard_gets(state) -> dict[str, int]:
    return {k: v for k, v in state["gets"].items() if k.endswith(".mdb")}


def test_records_match_local_and_warm_cache_downloads_nothing(served) -> None:
    url, state, tmp = served
    with open_dataset(tmp / "src" / "data.lmdb") as local:
        expected = all_records(local)
        shards = len(local.manifest.shards)
    with open_dataset(url, cache_dir=tmp / "cache") as ds:
        assert all_records(ds) == expected
    gets = shard_gets(state)
    assert len(gets) == shards and set(gets.values()) == {1}
    with open_dataset(url, cache_dir=tmp / "cache") as ds:  # warm: only the manifest again
        assert all_records(ds) == expected
    assert shard_gets(state) == gets
    assert state["gets"]["data.lmdb/manifest.json"] == 2


def test_limit_too_small_names_the_smallest_that_works(served) -> None:
    url, _, tmp = served
    with pytest.raises(InvalidArgumentError, match=r"cache_limit >= \d+ bytes") as info:
        open_dataset(url, cache_dir=tmp / "cache", cache_limit=1000, prefetch=1)
    need = int(str(info.value).split("cache_limit >= ")[1].split()[0])
    with open_dataset(url, cache_dir=tmp / "cache", cache_limit=need, prefetch=1) as ds:
        all_records(ds)  # the smallest limit it named does work (random access: 2 shards)
        assert ds.cache.usage() <= need


TWO_READERS = """
import sys
sys.path.insert(0, {tests!r})
from fastloader.format.open import open_dataset
with open_dataset({url!r}, cache_dir={cache!r}) as ds:
    for i in range(len(ds)):
        ds.record(i)
    print("downloads", ds.cache.downloads)
"""


def test_two_processes_share_the_cache_and_download_each_shard_once(served) -> None:
    url, state, tmp = served
    for name in list(os.listdir(tmp / "www" / "data.lmdb")):
        if name.endswith(".mdb"):  # slow shards: the two processes overlap on each
            state["delay"][f"data.lmdb/{name}"] = 0.3
    code = TWO_READERS.format(tests=str(TESTS), url=url, cache=str(tmp / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    gets = shard_gets(state)
    assert gets and set(gets.values()) == {1}, gets
    downloads = sorted(int(out.split()[-1]) for out in outs)
    index = len(os.listdir(tmp / "www" / "data.lmdb" / "index"))  # 10: a tree packs v2
    assert sum(downloads) == len(gets) + index + 1  # each shard and index file once (+ the
    # index files, 1 manifest copy per process: the manifest is always read remotely, the copy
    # is cached)


KILLED = """
from fastloader.format.open import open_dataset
ds = open_dataset({url!r}, cache_dir={cache!r})
ds.record(0)
"""


def test_a_download_killed_with_sigkill_leaves_nothing_trusted(served) -> None:
    url, state, tmp = served
    cache = tmp / "cache"
    state["delay"]["data.lmdb/shard-00000.mdb"] = 30
    proc = subprocess.Popen([sys.executable, "-c", KILLED.format(url=url, cache=str(cache))])
    try:
        deadline = time.monotonic() + 60
        while not any(".part-" in p.name for p in cache.rglob("*")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not any(p.name == "shard-00000.mdb" for p in cache.rglob("*"))
    state["delay"].clear()
    with open_dataset(url, cache_dir=cache) as ds, \
            open_dataset(tmp / "src" / "data.lmdb") as local:
        assert all_records(ds) == all_records(local)
    assert not any(".part-" in p.name for p in cache.rglob("*"))  # the dead one was removed


def test_a_corrupted_cached_shard_is_detected_and_replaced(served) -> None:
    url, state, tmp = served
    with open_dataset(url, cache_dir=tmp / "cache") as ds:
        expected = all_records(ds)
        cached = ds.root / ds.manifest.shards[0].file
    with open(cached, "r+b") as f:  # flip bytes inside the first record's page
        f.seek(4096 + 100)
        f.write(b"\xff" * 64)
    with open_dataset(url, cache_dir=tmp / "cache") as ds:
        assert all_records(ds) == expected
    assert state["gets"]["data.lmdb/shard-00000.mdb"] == 2


def test_a_dataset_changed_remotely_is_never_mixed(served) -> None:
    url, _, tmp = served
    www = tmp / "www" / "data.lmdb"
    ds = open_dataset(url, cache_dir=tmp / "cache")
    try:
        first = bytes(ds.record(0))
        shutil.rmtree(www)  # replaced by another dataset while ds still reads the old one
        packed_tree(tmp / "other", classes=4, per_class=8, shard_size=12000, quality=50,
                    max_side=20)
        shutil.copytree(tmp / "other" / "data.lmdb", www)
        last = len(ds) - 1
        if ds.shard_ids[last] == ds.shard_ids[0]:
            pytest.skip("the dataset has one shard")
        with pytest.raises(DatasetError, match=r"changed while this reader had it open") as e:
            ds.record(last)
        assert isinstance(e.value.__cause__, DatasetError)
    finally:
        ds.close()
    with open_dataset(url, cache_dir=tmp / "cache") as new, \
            open_dataset(tmp / "other" / "data.lmdb") as other:
        assert new.root != ds.root  # a new version: its own cache folder
        assert all_records(new) == all_records(other)
        assert bytes(new.record(0)) != first


def test_a_shard_damaged_remotely_is_fetched_twice_then_named(served) -> None:
    url, state, tmp = served
    with open_dataset(url, cache_dir=tmp / "cache") as ds:
        shard = tmp / "www" / "data.lmdb" / ds.manifest.shards[1].file
        data = bytearray(shard.read_bytes())
        data[5000] ^= 0xFF  # same size, same manifest: only the hash can tell
        shard.write_bytes(bytes(data))
        i = int((ds.shard_ids == 1).nonzero()[0][0])
        with pytest.raises(HashMismatchError, match=r"shard-00001\.mdb.*fetched twice"):
            ds.record(i)
    assert state["gets"]["data.lmdb/shard-00001.mdb"] == 2
    assert not (ds.root / ds.manifest.shards[1].file).exists()


def test_network_errors_retry_then_fail_naming_shard_and_url(served) -> None:
    url, state, tmp = served
    state["fail"]["data.lmdb/shard-00000.mdb"] = 2
    with open_dataset(url, cache_dir=tmp / "cache") as ds:
        ds.record(0)  # two 503s, then it came
        state["fail"]["data.lmdb/shard-00001.mdb"] = 100
        i = int((ds.shard_ids == 1).nonzero()[0][0])
        with pytest.raises(DatasetError, match=r"shard-00001\.mdb: downloading http://.*"
                                               r"shard-00001\.mdb failed 4 times"):
            ds.record(i)


def test_a_url_with_no_dataset_is_a_clear_error(served) -> None:
    url, _, tmp = served
    with pytest.raises(FastloaderError, match=r"manifest\.json does not exist"):
        open_dataset(url + "-missing", cache_dir=tmp / "cache")
    with pytest.raises(InvalidArgumentError, match="URL only"):
        open_dataset(tmp / "src" / "data.lmdb", cache_dir=tmp / "cache")


def test_a_pickled_remote_dataset_reopens_from_its_url_and_shares_the_cache(served) -> None:
    import pickle

    url, state, tmp = served
    with open_dataset(url, cache_dir=tmp / "cache") as ds:
        expected = all_records(ds)
        copy = pickle.loads(pickle.dumps(ds))
    with copy:
        assert copy.url == url and all_records(copy) == expected
    assert set(shard_gets(state).values()) == {1}


def test_hdf5_datasets_and_file_urls_read_through_the_cache(tmp_path: Path) -> None:
    src = tmp_path / "src"
    packed_tree(src, classes=3, per_class=6, shard_size=12000)
    from fastloader.pack.pipeline.tree import pack

    pack(src / "tree", src / "data.h5", workers=1, quiet=True, shard_size=12000)
    for name in ("data.h5", "data.lmdb"):
        with open_dataset(src / name) as local, \
                open_dataset(f"file://{src / name}", cache_dir=tmp_path / "cache",
                             cache_limit="10MB") as ds:
            assert len(ds.manifest.shards) > 1
            assert all_records(ds) == all_records(local)
