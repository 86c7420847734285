"""views= with pixel ops across real torch.distributed (gloo) processes: the ranks' samples are
disjoint and complete, each rank's views (crops and per-sample programs) are those of its
rank/world_size read from the process group, and a rank resumed mid-epoch from its state_dict
gives the rest of its batches."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

WORLD = 2
pytestmark = pytest.mark.heavy


def _views() -> list[Any]:
    from fastloader import (
        ColorJitter,
        GaussianBlur,
        RandomHorizontalFlip,
        RandomResizedCrop,
        RandomSolarize,
        View,
    )

    return [View([RandomResizedCrop(24), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.2, 0.1),
                  GaussianBlur(sigma=(0.1, 2.0), p=0.5)], count=2),
            View([RandomResizedCrop(12, scale=(0.05, 0.4)), RandomSolarize(128, p=0.5)])]


def _options() -> dict[str, Any]:
    return {"batch_size": 3, "shuffle": True, "seed": 4, "num_threads": 1, "device": "cpu",
            "views": _views()}


def _pass(loader: Any) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
    return [([v.clone() for v in views], labels.clone()) for views, labels in loader]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_main(rank: int, path: str, port: int, out: str) -> None:
    from fastloader import FastLoader

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:  # rank and world come from the process group, as in a torchrun job
        with FastLoader(path, **_options()) as loader:
            full = _pass(loader)
        with FastLoader(path, **_options()) as loader:
            iterator = iter(loader)
            next(iterator)
            state = loader.state_dict()
            del iterator
        with FastLoader(path, **_options()) as resumed:
            resumed.load_state_dict(state)
            rest = _pass(resumed)
        torch.save({"full": full, "rest": rest}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        all(torch.equal(p, q) for p, q in zip(x[0], y[0], strict=True))
        and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True))


@pytest.mark.timeout(600)
def test_gloo_ranks_draw_their_own_views_and_resume_them(tmp_path: Path) -> None:
    from fastloader import FastLoader

    make_tree(tmp_path / "tree", classes=14, per_class=1, size=(30, 40))  # a label: a sample
    pack(tmp_path / "tree", tmp_path / "d.lmdb", workers=1, quiet=True)
    path = str(tmp_path / "d.lmdb")
    mp.spawn(_rank_main, args=(path, _free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    runs = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    seen = [{int(y) for _, labels in run["full"] for y in labels} for run in runs]
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 14
    for rank, run in enumerate(runs):
        assert all(len(views) == 3 for views, _ in run["full"])
        assert _same(run["rest"], run["full"][1:])  # resumed mid-epoch: the same rest
        with FastLoader(path, rank=rank, world_size=WORLD, **_options()) as loader:
            assert _same(run["full"], _pass(loader))  # the group's rank: the same views
