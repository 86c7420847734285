"""A loader over a dataset URL, inherited by fork(), works in the child (its downloads too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastloader.loader.loader import FastLoader
from helpers import fork_mid_pass, train_transforms, wait_child

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's http://) is not installed")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: the case tested
@pytest.mark.timeout(120)
def test_a_forked_child_reads_a_remote_dataset(served, tmp_path: Path) -> None:
    url, _, tmp = served
    with FastLoader(url, batch_size=4, shuffle=True, transforms=train_transforms(),
                    num_threads=1, cache_dir=tmp / "cache", shuffle_window=2,
                    prefetch_shards=1) as loader:
        failure = fork_mid_pass(loader, seconds=60)  # downloads and a pass in flight
        assert failure is None, f"child {failure}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(60)
def test_a_forked_child_does_not_keep_its_parents_download_lock(tmp_path: Path) -> None:
    """A flock lives until every fd of it is closed: the child's inherited copy of a download
    lock the parent holds must not outlive the parent's release (the child would then wait
    for that shard forever)."""
    import fcntl

    from fastloader.format import cache

    path = tmp_path / "shard.dl"
    fd = cache._flock(path, fcntl.LOCK_EX)  # as a download in flight holds it
    assert fd is not None
    pid = os.fork()
    if pid == 0:  # the child: take the same lock once the parent lets go
        code = 1
        try:
            child_fd = cache._flock(path, fcntl.LOCK_EX)
            code = 0 if child_fd is not None else 2
        finally:
            os._exit(code)
    cache._unlock(fd)  # the parent's download ends
    assert wait_child(pid, 20) == 0, "the child never got the lock (None: it hung)"
