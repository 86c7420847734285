"""FastLoader contracts with no other test: 0-255 normalize constants, threads per local rank,
checkpoints loaded mid-pass or from another rank, the 512 MiB auto-prefetch cap, the 32-entry
skipped_samples list, and pack(restart_mcus != 2)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from fastloader.decode.augment import RandomResizedCrop
from fastloader.errors import InvalidArgumentError
from fastloader.loader.loader import FastLoader
from fastloader.loader.order.sampler import threads_per_rank, usable_cores
from fastloader.loader.pipeline.stats import Counters
from helpers import MEAN, STD, TRAIN, collect, same_batches

OPTIONS = {"batch_size": 4, "shuffle": True, "seed": 11, "transforms": TRAIN, "device": "cpu",
           "num_threads": 1}


def test_normalize_constants_in_the_0_255_scale_equal_the_0_1_scale(dataset_path: Path) -> None:
    scaled = (tuple(255 * m for m in MEAN), tuple(255 * s for s in STD))
    with FastLoader(dataset_path, **OPTIONS, normalize=(MEAN, STD)) as unit:
        want = collect(unit)
    with FastLoader(dataset_path, **OPTIONS, normalize=scaled) as pixel:
        got = collect(pixel)
    assert len(got) == len(want) == 6
    for (a, la), (b, lb) in zip(got, want, strict=True):
        assert torch.equal(la, lb)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert float(got[0][0].abs().max()) < 5  # really normalized, not x - 124


def test_threads_per_rank_shares_the_cores_among_local_ranks(
        dataset_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cores = usable_cores()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert threads_per_rank(4) == max(1, cores // 2)
    assert threads_per_rank(1) == cores  # one process in all: LOCAL_WORLD_SIZE is stale
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(4 * cores))
    assert threads_per_rank(8 * cores) == 1  # never zero
    for bad in ("0", "-2", "two", ""):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", bad)
        assert threads_per_rank(4) == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with FastLoader(dataset_path, batch_size=4, transforms=TRAIN, rank=0, world_size=4,
                    num_threads=None) as loader:
        assert loader.stats().num_threads == max(1, cores // 2)


def test_load_state_dict_during_a_pass_ends_it_and_resumes(dataset_path: Path) -> None:
    options = {**OPTIONS, "batch_size": 3, "prefetch": 1}
    with FastLoader(dataset_path, **options) as loader:
        loader.set_epoch(1)
        full = collect(loader)
    with FastLoader(dataset_path, **options) as loader:
        loader.set_epoch(1)
        first = iter(loader)
        head = [next(first) for _ in range(2)]
        state = loader.state_dict()
        assert (state["epoch"], state["batches_done"]) == (1, 2)
        extra = next(first)  # a third batch, past the checkpoint
        assert same_batches([(i.clone(), lab.clone()) for i, lab in head], full[:2])
        assert same_batches([(extra[0].clone(), extra[1].clone())], full[2:3])
        loader.load_state_dict(state)  # mid-pass: the running pass ends here
        assert not [t for t in threading.enumerate() if t.name.startswith("fastloader-producer")]
        assert same_batches(collect(loader), full[2:])


def test_a_checkpoint_from_another_rank_resumes_this_ranks_order(dataset_path: Path) -> None:
    # A checkpoint saved on rank 0 is loaded by every rank: each resumes its own shard.
    def ranked(rank: int) -> FastLoader:
        return FastLoader(dataset_path, **OPTIONS, rank=rank, world_size=2)

    with ranked(1) as loader:
        loader.set_epoch(2)
        full = collect(loader)
    with ranked(0) as rank0:
        rank0.set_epoch(2)
        iterator = iter(rank0)
        next(iterator)
        state = rank0.state_dict()
        del iterator
    assert state["rank"] == 0
    with ranked(1) as rank1:
        rank1.load_state_dict(state)
        assert rank1.state_dict()["rank"] == 1
        assert same_batches(collect(rank1), full[1:])


@pytest.mark.parametrize(("side", "accepted"), [(9459, True), (9460, False)])
def test_auto_prefetch_fits_two_slots_in_512_mib_by_default(dataset_path: Path, side: int,
                                                           accepted: bool) -> None:
    # One slot is batch x side x side x 3 bytes; prefetch="auto" needs two within the default
    # 512 MiB budget: 3 * 9459**2 <= 256 MiB < 3 * 9460**2. Nothing is allocated before iter().
    options = {"batch_size": 1, "transforms": [RandomResizedCrop(side)], "prefetch": "auto"}
    if accepted:
        with FastLoader(dataset_path, **options) as loader:
            assert loader.prefetch == 1 and loader.stats().ring_bytes == 0
    else:
        with pytest.raises(InvalidArgumentError, match="memory_budget"):
            FastLoader(dataset_path, **options)
        with FastLoader(dataset_path, **options, memory_budget=1 << 30) as loader:
            assert loader.prefetch >= 1


def test_skipped_samples_keeps_the_first_32() -> None:
    counters = Counters()
    for k in range(40):
        counters.add_skip(f"record {k}")
    stats = counters.snapshot(queue_depth=0, prefetch=1, ring_slots=2, ring_bytes=0,
                              pinned=False, num_threads=1, backend="pillow")
    assert stats.skipped == 40
    assert stats.skipped_samples == tuple(f"record {k}" for k in range(32))


@pytest.mark.native
@pytest.mark.parametrize("restart_mcus", [1, 4])
def test_pack_with_other_restart_intervals(tmp_path: Path, restart_mcus: int) -> None:
    from fastloader.decode import tiles
    from fastloader.decode.decode import decode
    from fastloader.format.open import open_dataset
    from fastloader.pack.pipeline.tree import pack
    from imagegen import make_tree

    tree = make_tree(tmp_path / "tree", classes=1, per_class=2, size=(64, 128))  # 8 MCUs a row
    dst = tmp_path / "t.lmdb"
    manifest = pack(tree, dst, tiles=True, restart_mcus=restart_mcus, workers=1)
    assert manifest.options["tiles"]["restart_mcus"] == restart_mcus
    with open_dataset(dst) as ds:
        for i in range(len(ds)):
            table = ds.tile_table(i)
            assert table is not None and table.restart_mcus == restart_mcus
            source = (tree / ds.path(i)).read_bytes()
            np.testing.assert_array_equal(decode(bytes(ds.record(i))), decode(source))
            assert tiles.scan(bytes(ds.record(i))).offsets.size == table.offsets.size
