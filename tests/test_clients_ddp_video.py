"""Two real processes over gloo with the video loader: built before init_process_group, the
ranks read disjoint halves of each epoch, agree on every video's frames (an all_gather of each
video's window checksum), and resume exactly on their own rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("av")

import fastloader
from videogen import make_clip

VIDEOS = 8

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import torch.distributed as dist
    import fastloader

    path, init, rank, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

    def build():
        return fastloader.FastLoader(
            path, batch_size=2, shuffle=True, num_threads=1, device="cpu",
            video=fastloader.Video(frames=4, stride=2),
            transforms=[fastloader.RandomResizedCrop(24), fastloader.RandomHorizontalFlip()])

    loader = build()  # as Lightning users build it: before the process group exists
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    sums = {}
    for (frames, times), labels in loader:
        for k, label in enumerate(labels.tolist()):
            sums[label] = int(frames[k].to(torch.int64).sum())
    # every rank's (label, checksum) pairs, gathered over gloo
    mine = torch.tensor(sorted(sums.items()), dtype=torch.int64)
    gathered = [torch.zeros_like(mine) for _ in range(2)]
    dist.all_gather(gathered, mine)
    loader.set_epoch(1)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = [labels.tolist() for _, labels in it]
    with build() as again:
        again.load_state_dict(state)
        resumed = [labels.tolist() for _, labels in again] == rest
    loader.close()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump({"mine": sorted(sums), "all": [g.tolist() for g in gathered],
                   "resumed_equal": resumed, "rank": state["rank"]}, f)
""")


pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ddp_video") / "v.lmdb"
    clips = [make_clip(frames=12 + k, width=32, height=32) for k in range(VIDEOS)]
    fastloader.pack([{"video": c, "label": k} for k, c in enumerate(clips)], root,
                    fields={"video": "video", "label": "int"})
    return root


def test_video_ranks_over_gloo_split_agree_and_resume(videos: Path, tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    init = f"file://{tmp_path / 'rendezvous'}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(videos), init, str(rank),
                               str(tmp_path / f"rank{rank}.json")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    first, second = (set(r["mine"]) for r in ranks)
    assert len(first) == len(second) == VIDEOS // 2
    assert first.isdisjoint(second) and first | second == set(range(VIDEOS))
    assert ranks[0]["all"] == ranks[1]["all"]  # gloo gave both ranks the same gathered sums
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["resumed_equal"] for r in ranks)
    # each video's frames are a function of (seed, epoch, video): one rank reading them alone
    with fastloader.FastLoader(videos, batch_size=VIDEOS, shuffle=True, device="cpu",
                               video=fastloader.Video(frames=4, stride=2),
                               transforms=[fastloader.RandomResizedCrop(24),
                                           fastloader.RandomHorizontalFlip()]) as alone:
        (frames, _), labels = next(iter(alone))
    want = sorted([label, int(frames[k].long().sum())] for k, label in enumerate(labels.tolist()))
    gathered = sorted(pair for rank in ranks[0]["all"] for pair in rank)
    assert gathered == want
