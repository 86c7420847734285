"""FastLoader lifetime: prompt producer shutdown, no leaked threads, no memory growth."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from pathlib import Path

import psutil
import pytest

from fastloader.errors import FastloaderError
from fastloader.loader.loader import FastLoader
from helpers import TRAIN


def fastloader_threads(kind: str = "fastloader-") -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(kind) and t.is_alive()]


def wait_for_no_threads(kind: str, seconds: float = 30.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while fastloader_threads(kind) and time.monotonic() < deadline:
        time.sleep(0.02)
    return fastloader_threads(kind)


def make(path: Path, **kwargs: object) -> FastLoader:
    # batch 2 and prefetch 1: the producer is soon blocked on a full ring, the hard case.
    options = {"batch_size": 2, "transforms": TRAIN, "prefetch": 1, "num_threads": 2}
    return FastLoader(path, **{**options, **kwargs})  # type: ignore[arg-type]


def test_break_stops_the_producer(dataset_path: Path) -> None:
    with make(dataset_path) as loader:
        for step, _ in enumerate(loader):
            if step == 1:
                time.sleep(0.2)  # let the producer fill the ring and block
                assert fastloader_threads("fastloader-producer")
                break
        assert wait_for_no_threads("fastloader-producer") == []
        assert len(list(loader)) == len(loader)  # the loader still works afterwards
    assert wait_for_no_threads("fastloader-") == []


def test_exception_in_training_loop_stops_the_producer(dataset_path: Path) -> None:
    loader = make(dataset_path)

    def train() -> None:
        for _images, _labels in loader:
            raise RuntimeError("loss is NaN")

    with pytest.raises(RuntimeError, match="NaN"):
        train()
    assert wait_for_no_threads("fastloader-producer") == []
    loader.close()
    assert wait_for_no_threads("fastloader-") == []


def test_del_and_close_end_all_threads(dataset_path: Path) -> None:
    loader = make(dataset_path)
    iterator = iter(loader)
    next(iterator)
    del iterator, loader
    gc.collect()
    assert wait_for_no_threads("fastloader-") == []
    with make(dataset_path) as loader:
        iterator = iter(loader)
        next(iterator)
        loader.close()
        with pytest.raises(FastloaderError, match=r"newer pass|closed"):
            next(iterator)
        with pytest.raises(FastloaderError, match="closed"):
            iter(loader)
    assert wait_for_no_threads("fastloader-") == []


def test_a_new_pass_ends_the_previous_one(dataset_path: Path) -> None:
    with make(dataset_path) as loader:
        first = iter(loader)
        next(first)
        second = iter(loader)
        assert len(list(second)) == len(loader)
        with pytest.raises(FastloaderError, match="newer pass"):
            next(first)
        assert len(fastloader_threads("fastloader-producer")) == 0


def test_twenty_epochs_do_not_grow_memory(dataset_path: Path) -> None:
    process = psutil.Process()
    with make(dataset_path, batch_size=4, prefetch=2) as loader:
        for _ in range(3):  # warm-up: ring, decoder threads, allocator pools
            for _batch in loader:
                pass
        gc.collect()
        before = process.memory_info().rss
        for _ in range(20):
            for _batch in loader:
                pass
        gc.collect()
        grown = process.memory_info().rss - before
        assert loader.sampler.epoch == 23
        assert len(fastloader_threads("fastloader-producer")) == 0
    assert grown < 20 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 20 epochs"


def test_a_passs_threads_are_freed_in_their_own_threads(dataset_path: Path) -> None:
    """threading runs Python code (its WeakSet of threads) when a Thread object is freed; freed
    in the main thread, a Ctrl-C raised inside it is lost (tests/test_exit_installed.py's soak
    caught one). So the producer and helper Thread objects of every pass, the first pass's
    dropped with its iterator at the end of its epoch, are freed by their own threads."""
    refs: list[weakref.ref[threading.Thread]] = []
    freed: list[str] = []

    def watch() -> None:
        for thread in threading.enumerate():
            if thread.name.startswith(("fastloader-producer", "fastloader-prepare")) \
                    and not any(ref() is thread for ref in refs):
                refs.append(weakref.ref(thread, lambda _: freed.append(
                    threading.current_thread().name)))

    with make(dataset_path) as loader:
        for _ in range(2):
            for _ in loader:
                watch()
    deadline = time.monotonic() + 10
    while len(freed) < len(refs) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.02)
    assert len(refs) >= 4 and len(freed) == len(refs)  # two passes: a producer and a helper each
    assert threading.current_thread().name not in freed, freed
