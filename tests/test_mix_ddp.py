"""A weighted mix across real torch.distributed (gloo) processes: 2 ranks stopped mid-epoch
resume on 3 ranks with another batch size, each from another rank's state; between them the
epoch's mixed order is delivered once, ranks disjoint."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fastloader.format.open import open_dataset
from fastloader.loader.order.mix_order import MixOrder
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

SIZES = (12, 26)  # a: 12 classes x 1, b: 26 classes x 1 (distinct names: a label names a sample)
STOP_WORLD, STOP_BATCH, STOP_STEPS = 2, 3, 2  # 12 of 38 samples delivered before the stop


pytestmark = pytest.mark.heavy


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_main(rank: int, world: int, batch_size: int, paths: list[str], port: int,
               out: str) -> None:
    from fastloader import FastLoader
    from fastloader.decode.augment import RandomResizedCrop

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:  # rank and world come from the process group, as in a torchrun job
        with FastLoader({"a": paths[0], "b": paths[1]}, weights={"a": 1, "b": 3},
                        batch_size=batch_size, shuffle=True, seed=5, num_threads=1,
                        device="cpu", transforms=[RandomResizedCrop(8)],
                        source_index=True) as loader:
            folder = Path(out)
            if world == STOP_WORLD:
                iterator = iter(loader)
                batches = [next(iterator) for _ in range(STOP_STEPS)]
                torch.save(loader.state_dict(), folder / f"mix_state{rank}.pt")
            else:  # each new rank loads the state another old rank saved
                loader.load_state_dict(torch.load(folder / f"mix_state{(rank + 1) % 2}.pt"))
                batches = list(loader)
            picks = [[loader.classes[int(y)], int(s)] for _, ys, ss in batches
                     for y, s in zip(ys, ss, strict=True)]
            (folder / f"mix_w{world}_rank{rank}.json").write_text(json.dumps(picks))
    finally:
        dist.destroy_process_group()


def _run(world: int, batch_size: int, paths: list[str], out: Path) -> list[list]:
    mp.spawn(_rank_main, args=(world, batch_size, paths, _free_port(), str(out)),
             nprocs=world, join=True)
    return [json.loads((out / f"mix_w{world}_rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.timeout(600)
def test_two_ranks_resume_a_mix_on_three_with_another_batch_size(tmp_path: Path) -> None:
    paths = []
    for name, count in zip("ab", SIZES, strict=True):
        make_tree(tmp_path / name, classes=count, per_class=1, size=(12, 16))
        for folder in (tmp_path / name).iterdir():  # names unique across the sources
            folder.rename(folder.with_name(f"{name}_{folder.name}"))
        pack(tmp_path / name, tmp_path / f"{name}.lmdb", workers=1, quiet=True)
        paths.append(str(tmp_path / f"{name}.lmdb"))
    head = [p for rank in _run(STOP_WORLD, STOP_BATCH, paths, tmp_path) for p in rank]
    rest = [p for rank in _run(3, 4, paths, tmp_path) for p in rank]
    assert len(head) == STOP_WORLD * STOP_BATCH * STOP_STEPS
    order = MixOrder(list(SIZES), (0.25, 0.75), sum(SIZES), False, True, 5).epoch_order(5, 0)
    assert len(rest) == 3 * -(-(len(order) - len(head)) // 3)  # the rest, padded to 3 ranks
    names = []  # the name of each mix id: source a's samples, then b's
    for path in paths:
        with open_dataset(path) as ds:
            names += [ds.classes[int(y)] for y in ds.labels]
    want = [names[i] for i in order.tolist()]  # b's 29 picks of 26 samples repeat some
    assert Counter(n for n, _ in head) == Counter(want[:len(head)])
    seen = Counter(n for n, _ in head + rest)
    assert not Counter(want) - seen  # every pick of the epoch delivered ...
    assert (seen - Counter(want)).total() == len(rest) - (len(order) - len(head))  # + padding
    assert all(n.startswith("ab"[s]) for n, s in head + rest)  # the source index names its source
