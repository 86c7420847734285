"""Elastic resume across real torch.distributed (gloo) processes: 4 ranks stopped mid-epoch
resume on 3 and on 8 ranks with another batch size, each rank from another rank's state."""

from __future__ import annotations

import json
import math
import socket
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

SAMPLES = 38  # one image per class: a label names its sample
STOP_WORLD, STOP_BATCH, STOP_STEPS = 4, 3, 2  # 24 samples delivered before the stop


pytestmark = [pytest.mark.heavy, pytest.mark.native_neutral]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_main(rank: int, world: int, batch_size: int, path: str, port: int,
               out: str) -> None:
    from fastloader import FastLoader
    from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:  # rank and world come from the process group, as in a torchrun job
        with FastLoader(path, batch_size=batch_size, shuffle=True, seed=9, num_threads=1,
                        device="cpu", transforms=[RandomResizedCrop(8),
                                                  RandomHorizontalFlip()]) as loader:
            folder = Path(out)
            if world == STOP_WORLD:  # the first run: stopped after STOP_STEPS batches
                loader.set_epoch(1)
                iterator = iter(loader)
                labels = [lab for _ in range(STOP_STEPS) for lab in next(iterator)[1].tolist()]
                torch.save(loader.state_dict(), folder / f"state{rank}.pt")
            else:  # each new rank loads the state another old rank saved
                state = torch.load(folder / f"state{(3 * rank + 1) % STOP_WORLD}.pt")
                loader.load_state_dict(state)
                labels = [lab for _, batch in loader for lab in batch.tolist()]
            counts = torch.tensor([len(labels)])
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)
            result = {"labels": labels, "most": int(counts), "len": len(loader)}
            (folder / f"w{world}_rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _run(world: int, batch_size: int, path: Path, out: Path) -> list[dict]:
    mp.spawn(_rank_main, args=(world, batch_size, str(path), _free_port(), str(out)),
             nprocs=world, join=True)
    return [json.loads((out / f"w{world}_rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[int]]:
    root = tmp_path_factory.mktemp("elastic_ddp")
    make_tree(root / "tree", classes=SAMPLES, per_class=1, size=(12, 16))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    head = [lab for r in _run(STOP_WORLD, STOP_BATCH, root / "data.lmdb", root)
            for lab in r["labels"]]
    assert len(head) == len(set(head)) == STOP_WORLD * STOP_BATCH * STOP_STEPS
    return root / "data.lmdb", root, head


@pytest.mark.parametrize(("world", "batch_size"), [(3, 5), (8, 2)])
def test_four_ranks_resume_on_another_world_and_batch_size(
        stopped: tuple[Path, Path, list[int]], world: int, batch_size: int) -> None:
    path, out, head = stopped
    ranks = _run(world, batch_size, path, out)
    left = SAMPLES - len(head)
    per_rank = -(-left // world)
    assert all(len(r["labels"]) == r["most"] == per_rank for r in ranks)  # lock-step ranks
    fresh = math.ceil(math.ceil(SAMPLES / world) / batch_size)  # a fresh epoch's batches
    moved = STOP_STEPS + math.ceil(per_rank / batch_size)  # the number after the last batch
    assert {r["len"] for r in ranks} == {max(fresh, moved)}
    rest = [lab for r in ranks for lab in r["labels"]]
    counts = Counter(head + rest)
    assert set(counts) == set(range(SAMPLES))  # every sample of the epoch delivered ...
    assert not set(head) & set(rest)  # ... none delivered before the stop again ...
    assert len(rest) - left == per_rank * world - left < world  # ... padding only to even
