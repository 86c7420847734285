"""An iterator keeps its loader alive, through garbage collection, and lets it go once dropped
(no leak), on the native and the DALI path (issue 14 item 8: a loader collected, and closed by
its finalizer, under a live iterator would end the pass; tests/test_clients_compat.py peeks)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

from fastloader.decode.augment import CenterCrop
from fastloader.loader.dali.pipeline import dali_available
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

BACKENDS = ["auto", pytest.param("dali", marks=pytest.mark.skipif(
    not dali_available(), reason="NVIDIA DALI is not importable here"))]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lifetime")
    make_tree(root / "tree", classes=2, per_class=4, size=(24, 28))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def build(packed: Path, backend: str) -> Any:
    return FastLoader(packed, batch_size=3, transforms=[CenterCrop(16)], device="cpu",
                      num_threads=1, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_iterator_holds_its_loader_until_it_is_dropped(packed: Path, backend: str) -> None:
    loader = build(packed, backend)
    alive = weakref.ref(loader)
    iterator = iter(loader)
    del loader
    gc.collect()  # a loader only the iterator refers to must not be collected (and closed)
    assert alive() is not None
    assert len(next(iterator)[1]) == 3
    assert sum(len(labels) for _, labels in iterator) == 5  # the rest of the pass
    del iterator
    gc.collect()
    assert alive() is None  # nothing else keeps it: dropped, closed by its finalizer
