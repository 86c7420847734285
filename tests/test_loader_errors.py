"""FastLoader over bad records: raise naming shard, index and source; or skip and count."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from fastloader.errors import CorruptRecordError, DecodeError
from fastloader.loader.loader import FastLoader
from helpers import BAD, TRAIN, damaged


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
