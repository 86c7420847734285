"""FastLoader over bad records: raise naming shard, index and source; or skip and count. And
over bad arguments: refused naming the argument, before anything is opened or started."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import fastloader
from fastloader.decode._native import native_available
from fastloader.errors import (
    CorruptRecordError,
    DecodeError,
    FastloaderError,
    InvalidArgumentError,
    InvalidTypeError,
)
from fastloader.loader.loader import FastLoader
from helpers import BAD, TRAIN, damaged, packed_tree


@pytest.mark.parametrize("how", ["garbage", "unreadable"])
def test_bad_record_raises_naming_shard_index_and_source(dataset_path: Path, how: str) -> None:
    dataset = damaged(dataset_path, how)
    expected = DecodeError if how == "garbage" else CorruptRecordError
    loader = FastLoader(dataset, batch_size=4, shuffle=True, transforms=TRAIN)
    with pytest.raises(expected) as caught:
        for _batch in loader:
            pass
    loader.close()
    message = str(caught.value)
    assert f"record {BAD}" in message
    assert dataset.shard_file(BAD) in message and dataset.path(BAD) in message
    assert "on_error='skip'" in message
    assert not [t for t in threading.enumerate() if t.name.startswith("fastloader-producer")]
    dataset.close()


def test_skip_replaces_the_sample_and_counts_it(dataset_path: Path) -> None:
    dataset = damaged(dataset_path, "garbage")
    with FastLoader(dataset, batch_size=4, transforms=TRAIN, on_error="skip") as loader:
        order = list(loader.sampler)
        labels = torch.cat([labels for _, labels in loader])
        assert len(labels) == len(dataset)
        stats = loader.stats()
    assert stats.skipped == 1
    assert len(stats.skipped_samples) == 1  # which record, so the user can repack or remove it
    assert f"record {BAD}" in stats.skipped_samples[0]
    assert dataset.path(BAD) in stats.skipped_samples[0]
    # The replacement is the next record: BAD + 1, with its own label.
    expected = dataset.labels[[BAD + 1 if i == BAD else i for i in order]]
    assert labels.tolist() == expected.tolist()
    dataset.close()


@pytest.mark.parametrize("how", ["garbage", "unreadable", "reader crash"])
def test_batches_before_a_bad_one_are_delivered_first(dataset_path: Path, how: str) -> None:
    # The producer's helper reads batch b + 1 while batch b decodes: a failure while reading
    # the next batch must still come after every batch before it.
    dataset = damaged(dataset_path, "unreadable" if how == "reader crash" else how)
    if how == "reader crash":
        failing = dataset.record

        def record(i: int, verify: bool = False) -> object:
            if i == BAD:
                raise RuntimeError("reader crashed")
            return failing(i, verify)

        dataset.record = record  # type: ignore[method-assign]
    with FastLoader(dataset, batch_size=3, shuffle=True, seed=2, transforms=TRAIN,
                    num_threads=2, device="cpu") as loader:
        bad_batch = list(loader.sampler).index(BAD) // 3
        assert bad_batch > 0  # seed 2 puts the bad record after the first batch
        delivered = 0
        with pytest.raises((DecodeError, CorruptRecordError, RuntimeError)):
            for _batch in loader:
                delivered += 1
    assert delivered == bad_batch
    dataset.close()


@pytest.fixture(scope="module")
def private_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset no other test module opens: an LMDB environment is shared in a process, so a
    dataset that another test left open would hide a new open of the same one."""
    return packed_tree(tmp_path_factory.mktemp("private"), classes=2, per_class=4)


def _dataset_fds(root: Path) -> dict[str, str]:
    """The files of `root` this process holds open, by fd (earlier tests' loaders may still
    hold some: compare what a call leaves with what was there before it)."""
    held = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd is gone by now
            held[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return {fd: path for fd, path in held.items() if path.startswith(str(root))}


def _threads() -> tuple[set[threading.Thread], int]:
    """Python's threads, and all of this process's (native decode threads are no Python's)."""
    return set(threading.enumerate()), len(os.listdir("/proc/self/task"))


def _new_fds(root: Path, before: dict[str, str]) -> dict[str, str]:
    return {fd: path for fd, path in _dataset_fds(root).items() if before.get(fd) != path}


BAD_ARGUMENTS = [
    ({"batch_size": 0}, "batch_size=0"),
    ({"batch_size": "64"}, "batch_size must be"),
    ({"shuffle": 1}, "shuffle must be"),
    ({"seed": -1}, "seed=-1"),
    ({"rank": 1}, "rank=1"),
    ({"rank": 2, "world_size": 2}, "rank=2"),
    ({"num_threads": "many"}, "num_threads must be"),
    ({"num_threads": 5000}, "num_threads=5000"),
    ({"prefetch": 0}, "prefetch=0"),
    ({"memory_budget": 0}, "memory_budget=0"),
    ({"device": "tpu"}, "device='tpu'"),
    ({"normalize": (1, 2, 3)}, "normalize must be"),
    ({"dtype": "float32"}, "dtype must be"),
    ({"on_error": "ignore"}, "on_error='ignore'"),
    ({"max_skips": 3}, "max_skips=3"),  # without on_error="skip"
    ({"transforms": ["crop"]}, r"transforms\[0\]='crop'"),
    ({"backend": "opencv"}, "backend='opencv'"),
    ({"sampler": [0, 1], "shuffle": True}, "shuffle=True"),
    ({"sampler": 3}, "sampler must be"),
    ({"batch_transform": 5}, "batch_transform=5"),
    ({"verify_records": 1}, "verify_records must be"),
    ({"min_box_visibility": 2.0}, "min_box_visibility=2.0"),
    ({"shuffle_window": 0}, "shuffle_window=0"),
    ({"cache_dir": "/tmp/cache"}, "cache_dir='/tmp/cache'"),
    ({"roi_decode": False}, "roi_decode=False is invalid: applies to the DALI loader only"),
    ({"num_workers": 4}, "num_workers=4 is invalid: is a DataLoader argument"),
    ({"batchsize": 4}, "batchsize=4 is invalid: .* Did you mean batch_size="),
    # Checked once the dataset is open (its fields): the open dataset is closed again.
    ({"fields": ("no_such_field",)}, "no_such_field"),
    ({"transforms": None}, "transforms=None is invalid: images would come out in"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_ARGUMENTS,
                         ids=[f"{next(iter(k))}-{i}" for i, (k, _) in enumerate(BAD_ARGUMENTS)])
def test_a_bad_argument_leaves_no_thread_and_no_open_file(
        private_path: Path, kwargs: dict[str, Any], message: str) -> None:
    """Every argument is checked before a file is opened or a thread started; one that needs
    the open dataset releases it again. The error names the argument as the call spelled it."""
    gc.collect()
    (threads, tasks), fds = _threads(), _dataset_fds(private_path)
    with pytest.raises(FastloaderError, match=message) as caught:
        FastLoader(private_path, **{"device": "cpu", "transforms": TRAIN, **kwargs})
    assert isinstance(caught.value, (InvalidArgumentError, InvalidTypeError))
    del caught  # its traceback holds the half-built loader's frame
    gc.collect()
    assert _threads()[0] <= threads and _threads()[1] <= tasks
    assert _new_fds(private_path, fds) == {}


def test_the_fd_check_sees_an_open_dataset(private_path: Path) -> None:
    """The checks above can fail: a loader that is built holds its dataset's shard open, and
its decode threads (native ones too) run until it is closed."""
    gc.collect()
    fds = _dataset_fds(private_path)
    with FastLoader(private_path, device="cpu", transforms=TRAIN, num_threads=2) as loader:
        next(iter(loader))  # the decode threads, native ones included, run now
        tasks = _threads()[1]
        assert _new_fds(private_path, fds) != {}
    if native_available():  # Pillow's decode threads are a pool the process keeps
        assert _threads()[1] < tasks
    assert _new_fds(private_path, fds) == {}


@pytest.mark.native_neutral
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"prefetch": "auto"}, "prefetch must be"),
    ({"max_skips": 3}, "max_skips=3 is invalid: is the budget of on_error='skip'"),
    ({"verify_records": True}, "verify_records=True is invalid: applies to the packed loader"),
    ({"transforms": [fastloader.ResizeFit(16)]}, "ResizeFit"),
    ({"transforms": None}, "transforms=None is invalid: images would come out in"),
])
def test_a_bad_dali_argument_leaves_no_thread_and_no_open_file(
        private_path: Path, kwargs: dict[str, Any], message: str) -> None:
    pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the [dali] extra)")
    gc.collect()
    (threads, tasks), fds = _threads(), _dataset_fds(private_path)
    with pytest.raises(FastloaderError, match=message):
        FastLoader(private_path, **{"device": "cpu", "backend": "dali", "transforms": TRAIN,
                                    **kwargs})
    gc.collect()
    assert _threads()[0] <= threads and _threads()[1] <= tasks
    assert _new_fds(private_path, fds) == {}
