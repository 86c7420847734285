"""Soak: a child forked while a URL loader's pass and downloads run never hangs (30 forks).

The single-fork test in test_remote_fork.py hit this hang about 1 run in 15 before inherited
LMDB environments stopped being closed in the child; 30 forks find it with ~90% odds.
"""

from __future__ import annotations

import os

import pytest

from fastloader.loader.loader import FastLoader
from helpers import fork_mid_pass, train_transforms

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's http://) is not installed")

FORKS = 30


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: the case tested
@pytest.mark.timeout(1800)
def test_thirty_children_forked_mid_pass_over_a_url_all_finish(served) -> None:
    url, _, tmp = served
    failures = []
    for run in range(FORKS):
        with FastLoader(url, batch_size=4, shuffle=True, transforms=train_transforms(),
                        num_threads=1, cache_dir=tmp / f"cache{run}", shuffle_window=2,
                        prefetch_shards=1) as loader:  # downloads in flight at fork time
            failure = fork_mid_pass(loader)
            if failure:
                failures.append(f"fork {run}: {failure}")
    assert not failures, failures
