"""Soak: 30 children forked while a local loader's Pillow-path pass runs all get a working
loader. Before the decoder forgot (instead of shutting down) the parent's thread pool in the
child, about 1 fork in 7 hung on a lock a parent thread held at fork time."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from fastloader.errors import FastloaderError
from fastloader.loader.loader import FastLoader
from helpers import run_in_fork, train_transforms

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
                        device="cpu") as loader:
            expected = [labels.tolist() for _, labels in loader]
            loader.set_epoch(0)
            it = iter(loader)
            next(it)  # a pass in flight, the Pillow pool's threads busy, at fork time

            def child(loader: FastLoader = loader, it=it, expected: list = expected) -> int:
                with contextlib.suppress(FastloaderError):  # test_exit_fork checks how
                    next(it)  # the parent's pass ends in the child
                loader.set_epoch(0)
                return 0 if [lab.tolist() for _, lab in loader] == expected else 2

            status, message = run_in_fork(child, 40)
            if status != 0:
                failures.append(f"fork {run}: exit {status} (None: hung) {message}")
            assert sum(1 for _ in it) == len(loader) - 1
    assert not failures, failures
