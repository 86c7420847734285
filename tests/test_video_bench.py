"""benchmarks/bench_video_loader.py: its DataLoader baselines decode the window they mean to, and
it runs end to end in its smoke mode (its numbers are not checked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fastloader.decode import video

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
bench = pytest.importorskip("bench_video_loader",
                            reason="the video benchmark needs PyAV (the video extra)")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, int]]:
    spec = bench.ClipSpec(count=4, classes=2, width=64, height=48, seconds=(2.0, 3.0),
                          gop_seconds=(0.5, 1.0))
    return bench.ensure_clips(tmp_path_factory.mktemp("vbench") / "video", spec)


def test_the_tree_is_kinetics_shaped_and_reused(tree: list[tuple[Path, int]]) -> None:
    root = tree[0][0].parent.parent
    assert sorted({p.parent.name for p, _ in tree}) == ["class_000", "class_001"]
    assert [label for _, label in tree] == [0, 0, 1, 1]
    info = video.probe(tree[0][0].read_bytes())
    assert info.codec == "h264" and (info.width, info.height) == (64, 48)
    assert 2.0 <= info.duration <= 3.0 and len(info.keyframes) >= 2  # a keyframe to seek to
    stamp = (root / ".clipspec.json").stat().st_mtime_ns
    assert bench.ensure_clips(root, bench.ClipSpec(count=4, classes=2, width=64, height=48,
                                                   seconds=(2.0, 3.0), gop_seconds=(0.5, 1.0))
                              ) == tree
    assert (root / ".clipspec.json").stat().st_mtime_ns == stamp  # not made again


def test_both_pyav_baselines_decode_the_same_window(tree: list[tuple[Path, int]]) -> None:
    """The seeking baseline must decode what the decode-from-start one does (the window at the
    same random start), or the two rows would time different work."""
    for seed in range(6):
        for path, _ in tree:
            torch.manual_seed(seed)
            start = bench.decode_from_start(path)
            torch.manual_seed(seed)
            seek = bench.decode_seek(path)
            assert start.shape == (bench.FRAMES, 48, 64, 3)
            np.testing.assert_array_equal(seek, start)


def test_one_crop_and_flip_per_clip() -> None:
    torch.manual_seed(0)
    still = np.repeat(np.random.default_rng(0).integers(0, 256, (1, 40, 50, 3), np.uint8),
                      4, axis=0)
    clip = bench.crop_flip(still)
    assert clip.shape == (4, 3, bench.SIZE, bench.SIZE) and clip.dtype == torch.uint8
    assert all(torch.equal(clip[0], frame) for frame in clip)  # every frame cropped alike


def test_pack_cost_counts_hours_and_bytes(tree: list[tuple[Path, int]], tmp_path: Path) -> None:
    costs = bench.pack_cost(tree, tree[0][0].parent.parent, tmp_path, rounds=1)
    assert [cost["via"] for cost in costs] == ["packdata CLI", "fastloader.pack()"]
    for cost in costs:
        assert 8.0 / 3600 <= cost["hours"] <= 12.0 / 3600
        assert cost["source_bytes"] == sum(p.stat().st_size for p, _ in tree)
        assert cost["stored_bytes"] >= cost["source_bytes"]  # the clips are stored as given
        assert cost["s_per_hour"] > 0
    assert not any(tmp_path.iterdir())


@pytest.mark.heavy
def test_quick_mode_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "video.jsonl"
    assert bench.main(["--quick", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    names = {r["name"] for r in records if r["kind"] == "summary"}
    assert {"DataLoader PyAV from start workers=2", "DataLoader PyAV seek workers=2"} <= names
    if hasattr(bench.fastloader_module(), "Video"):
        assert "FastLoader threads=2" in names
