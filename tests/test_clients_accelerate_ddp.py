"""Two real processes under Accelerate (multi-CPU over gloo), loaders built before it starts.

prepare() keeps a FastLoader (it shards itself), skip_first_batches() yields each rank's own
tail of the pass on the packed and the drop-in path, and a packed loader's sampler shows this
rank's share as soon as the process group exists, before any pass.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

pytest.importorskip("accelerate", reason="accelerate is a test dependency")

SAMPLES = 12  # each image its own class: the labels a rank gets name the samples it read

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from fastloader.decode.augment import RandomResizedCrop
    from fastloader.loader.loader import FastLoader

    path, out = sys.argv[1], sys.argv[2]

    class Indices(torch.utils.data.Dataset):
        def __len__(self):
            return 12
        def __getitem__(self, i):
            return i

    # Built before Accelerate exists (and with it the process group).
    packed = FastLoader(path, batch_size=2, shuffle=True, transforms=[RandomResizedCrop(16)],
                        num_threads=1, device="cpu")
    dropin = FastLoader(Indices(), batch_size=2, shuffle=True, num_workers=0)
    result = {"before": packed.sampler.indices().tolist()}
    import accelerate
    accelerator = accelerate.Accelerator(cpu=True)
    result["world"] = accelerator.num_processes
    result["after"] = packed.sampler.indices().tolist()
    result["prepared_is_loader"] = accelerator.prepare(packed) is packed
    packed.set_epoch(1)
    everything = [(i.clone(), l.clone()) for i, l in packed]
    result["labels"] = [l for _, labels in everything for l in labels.tolist()]
    packed.set_epoch(1)
    tail = list(accelerator.skip_first_batches(packed, 2))
    result["packed_tail_equal"] = len(tail) == len(everything) - 2 and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(tail, everything[2:]))
    dropin.set_epoch(1)
    whole = [b.tolist() for b in dropin]
    dropin.set_epoch(1)
    result["dropin"] = [i for b in whole for i in b]
    result["dropin_tail_equal"] = [
        b.tolist() for b in accelerator.skip_first_batches(dropin, 1)] == whole[1:]
    packed.close()
    accelerator.wait_for_everyone()
    with open(out, "w") as f:
        json.dump(result, f)
""")


pytestmark = pytest.mark.heavy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_accelerate_two_processes_prepare_skip_and_shard(tmp_path: Path) -> None:
    make_tree(tmp_path / "tree", classes=SAMPLES, per_class=1, size=(24, 28))
    pack(tmp_path / "tree", tmp_path / "data.lmdb", workers=1, quiet=True)
    script = tmp_path / "accelerate_rank.py"
    script.write_text(SCRIPT)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "RANK": str(rank), "LOCAL_RANK": str(rank),
               "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
        procs.append(subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "data.lmdb"),
             str(tmp_path / f"rank{rank}.json")], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    for r in ranks:
        assert len(r["before"]) == SAMPLES  # no process group yet: world 1, all samples
        assert len(r["after"]) == SAMPLES // 2  # read at call time: this rank's share
        assert r["prepared_is_loader"] and r["packed_tail_equal"] and r["dropin_tail_equal"]
    for key in ("after", "labels", "dropin"):
        first, second = (set(r[key]) for r in ranks)
        assert first.isdisjoint(second) and first | second == set(range(SAMPLES)), key
