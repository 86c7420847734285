"""Soak: the video loader's memory stays flat over a long run (issue 37: RSS within 10% between the
1st and the 10th pass over 2,000 clips). Peers' video readers grow until OOM (DALI#4256, #4675;
decord #157, #208): decoder contexts, frame pools or per-clip buffers kept past their clip."""

from __future__ import annotations

import gc
from pathlib import Path

import psutil
import pytest

import fastloader
from videogen import make_clip

CLIPS, PASSES, DISTINCT = 2000, 10, 10


@pytest.fixture(scope="module")
def many_clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 tiny H.264 clips packed in an LMDB: ten distinct encodings (8-17 frames, keyframe
    intervals 3-6) each stored 200 times, so making them is cheap and every record is decoded."""
    pytest.importorskip("av", reason="video fields need PyAV (the video extra)")
    encoded = [make_clip(frames=8 + k, width=32, height=24, gop=3 + k % 4)
               for k in range(DISTINCT)]
    path = tmp_path_factory.mktemp("video-soak") / "clips.lmdb"
    fastloader.pack([{"video": encoded[i % DISTINCT], "label": i % DISTINCT}
                     for i in range(CLIPS)], path, fields={"video": "video", "label": "int"})
    return path


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rss_is_flat_between_the_first_and_the_tenth_pass(many_clips: Path) -> None:
    process = psutil.Process()
    rss: list[int] = []
    seen = 0
    with fastloader.FastLoader(many_clips, batch_size=16, shuffle=True, num_threads=2,
                               video=fastloader.Video(frames=8, stride=2),
                               transforms=[fastloader.RandomResizedCrop(16),
                                           fastloader.RandomHorizontalFlip()]) as loader:
        for _ in range(PASSES):
            for (clips, times), labels in loader:
                seen += clips.shape[0]
                del clips, times, labels
            gc.collect()
            rss.append(process.memory_info().rss)
    assert seen == CLIPS * PASSES  # every clip of every pass was decoded and delivered
    first, last = rss[0], rss[-1]
    mib = [round(r / 2**20, 1) for r in rss]
    assert last <= first * 1.10, (
        f"RSS grew {100 * (last / first - 1):.1f}% from pass 1 to pass {PASSES} (MiB per pass:"
        f" {mib})")
