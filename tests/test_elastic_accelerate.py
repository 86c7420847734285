"""Accelerate's save_state/load_state carry a FastLoader registered for checkpointing, and the
state it saved resumes a loader of another batch size (the two lines README documents)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastloader import FastLoader
from fastloader.decode.augment import CenterCrop

accelerate = pytest.importorskip("accelerate", reason="accelerate is a test dependency")

OPTIONS = {"shuffle": True, "seed": 8, "num_threads": 1, "device": "cpu",
           "transforms": [CenterCrop(8)]}


def test_save_state_and_load_state_resume_on_another_batch_size(dataset_path: Path,
                                                                tmp_path: Path) -> None:
    with FastLoader(dataset_path, batch_size=4, **OPTIONS) as loader:
        order = loader.sampler.indices().tolist()
        labels = loader.dataset.packed.labels
        saver = accelerate.Accelerator(cpu=True)
        saver.register_for_checkpointing(loader)
        iterator = iter(loader)
        next(iterator), next(iterator), next(iterator)  # 12 of 24 samples
        saver.save_state(str(tmp_path / "ckpt"))
        del iterator
    with FastLoader(dataset_path, batch_size=5, **OPTIONS) as again:
        restorer = accelerate.Accelerator(cpu=True)
        restorer.register_for_checkpointing(again)
        restorer.load_state(str(tmp_path / "ckpt"))
        assert again.sampler.num_batches(5) == 3 + 3  # 3 batches of 4 done; 12 left, by 5
        rest = [lab for _, batch in again for lab in batch.tolist()]
    assert rest == labels[order[12:]].tolist()
