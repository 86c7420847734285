"""Two real processes over gloo: loaders built before init_process_group still shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

# Each image is its own class, so the labels a rank receives name the samples it read.
SAMPLES = 10

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import torch.distributed as dist
    from fastloader.decode.augment import CenterCrop
    from fastloader.loader.loader import FastLoader

    path, init, rank, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

    class Indices(torch.utils.data.Dataset):
        def __len__(self):
            return 10
        def __getitem__(self, i):
            return i

    # Built as Lightning users build them: before the process group exists.
    packed = FastLoader(path, batch_size=2, shuffle=True, transforms=[CenterCrop(16)],
                        num_threads=1, device="cpu")
    dropin = FastLoader(Indices(), batch_size=2, shuffle=True, num_workers=0)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    result = {"len": len(packed), "dropin_len": len(dropin)}
    result["packed"] = [l for _, labels in packed for l in labels.tolist()]
    result["dropin"] = [i for batch in dropin for i in batch.tolist()]
    # Exact resume on this rank: a checkpoint after one batch of the next epoch.
    packed.set_epoch(1)
    it = iter(packed)
    next(it)
    state = packed.state_dict()
    rest = [labels.tolist() for _, labels in it]
    with FastLoader(path, batch_size=2, shuffle=True, transforms=[CenterCrop(16)],
                    num_threads=1, device="cpu") as again:
        again.load_state_dict(state)
        result["resumed_equal"] = [labels.tolist() for _, labels in again] == rest
    result["state"] = {k: state[k] for k in ("rank", "world_size", "epoch", "batches_done")}
    packed.close()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(result, f)
""")


pytestmark = [pytest.mark.heavy, pytest.mark.native_neutral]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ddp")
    make_tree(root / "tree", classes=SAMPLES, per_class=1, size=(24, 28))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def test_loaders_built_before_init_process_group_give_disjoint_covering_ranks(
        packed: Path, tmp_path: Path) -> None:
    script = tmp_path / "ddp_rank.py"
    script.write_text(SCRIPT)
    init = f"file://{tmp_path / 'rendezvous'}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(packed), init, str(rank),
                               str(tmp_path / f"rank{rank}.json")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for path in ("packed", "dropin"):
        first, second = (set(r[path]) for r in ranks)
        assert len(ranks[0][path]) == len(ranks[1][path]) == SAMPLES // 2
        assert first.isdisjoint(second), path
        assert first | second == set(range(SAMPLES)), path
    assert [r["len"] for r in ranks] == [3, 3]  # 5 samples per rank in batches of 2
    assert [r["dropin_len"] for r in ranks] == [3, 3]
    assert [r["state"]["rank"] for r in ranks] == [0, 1]
    assert all(r["state"]["world_size"] == 2 for r in ranks)
    assert all(r["resumed_equal"] for r in ranks)
