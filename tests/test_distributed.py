"""Two torch.distributed (gloo) ranks: equal batch counts, disjoint shards, full coverage."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_main(rank: int, path: str, port: int, out: str) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from fastloader.loader.loader import FastLoader
    from helpers import TRAIN

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=WORLD)
    try:
        result = {}
        for drop_last in (False, True):
            with FastLoader(path, batch_size=4, shuffle=True, seed=1, transforms=TRAIN,
                            drop_last=drop_last, num_threads=1) as loader:
                assert loader.sampler.rank == rank and loader.sampler.world_size == WORLD
                loader.set_epoch(1)
                order = list(loader.sampler)
                labels = [lab for _, batch in loader for lab in batch.tolist()]
                counts = torch.tensor([len(loader)])
                dist.all_reduce(counts)  # the collective hangs if ranks disagree on len
                result[str(drop_last)] = {"order": order, "labels": labels,
                                          "batches": len(loader), "sum": int(counts)}
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def test_two_ranks_split_the_dataset(tmp_path: Path) -> None:
    from fastloader.format.open import open_dataset
    from helpers import packed_tree

    path = packed_tree(tmp_path, classes=3, per_class=9)  # 27 samples: uneven over 2 ranks
    mp.spawn(_rank_main, args=(str(path), _free_port(), str(tmp_path)), nprocs=WORLD,
             join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    labels = open_dataset(path).labels
    # drop_last pads nothing and also drops each rank's partial last batch (13 // 4 = 3).
    for drop_last, per_rank, batches in (("False", 14, 4), ("True", 13, 3)):
        parts = [r[drop_last] for r in results]
        assert [len(p["order"]) for p in parts] == [per_rank, per_rank]
        assert parts[0]["batches"] == parts[1]["batches"] == batches
        assert parts[0]["sum"] == 2 * parts[0]["batches"]
        for part in parts:
            assert part["labels"] == labels[part["order"][: batches * 4]].tolist()
        union = set(parts[0]["order"]) | set(parts[1]["order"])
        if drop_last == "True":
            assert not set(parts[0]["order"]) & set(parts[1]["order"])
            assert len(union) == 26
        else:  # padded by one wrapped sample, like DistributedSampler
            assert union == set(range(27))
            assert len(set(parts[0]["order"]) & set(parts[1]["order"])) <= 1
