"""Soak: 30 children forked while a local loader's Pillow-path pass runs all get a working
loader. Before the decoder forgot (instead of shutting down) the parent's thread pool in the
child, about 1 fork in 7 hung on a lock a parent thread held at fork time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastloader.loader.loader import FastLoader
from helpers import fork_mid_pass, train_transforms

FORKS = 30


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: the case tested
@pytest.mark.timeout(1800)
def test_thirty_children_forked_mid_pass_all_get_a_working_loader(dataset_path: Path) -> None:
    failures = []
    for run in range(FORKS):
        with FastLoader(dataset_path, batch_size=4, shuffle=True, backend="pillow",
                        transforms=train_transforms(), num_threads=3, prefetch=2,
                        device="cpu") as loader:  # the Pillow pool's threads busy at fork time
            failure = fork_mid_pass(loader, end_parent_pass=True)
            if failure:
                failures.append(f"fork {run}: {failure}")
    assert not failures, failures
