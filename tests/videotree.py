"""A Kinetics-style tree of synthetic clips for the video tests: the clips (H.264 and VP9, odd
sizes, a variable rate), their class folders, the meta check against decode/video.probe, and
the packdata command line. A helper module, not a test module: the test modules import it.

PyAV is imported on use (through videogen): the modules using this one skip where it is
missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from fastloader.decode import video
from fastloader.format.kinds.video import META
from videogen import make_clip

# name -> (make_clip options, suffix): H.264 and VP9, even and odd sizes, a variable rate
CLIPS = {
    "h264": (dict(codec="libx264", frames=24, width=64, height=48), ".mp4"),
    "h264_odd": (dict(codec="libx264", frames=10, width=63, height=45, rate=10), ".mp4"),
    "vp9_odd": (dict(codec="libvpx-vp9", frames=16, width=47, height=33), ".webm"),
    "h264_vfr": (dict(codec="libx264", frames=6, pts=[0, 10, 13, 30, 55, 90]), ".mov"),
}
# class -> its clips (names of CLIPS), as a Kinetics-style tree holds them
TREE = {"jumping": ["h264", "vp9_odd"], "running": ["h264_odd"], "sitting": ["h264_vfr"]}


def make_clips() -> dict[str, bytes]:
    """Each of CLIPS encoded."""
    return {name: make_clip(**options) for name, (options, _) in CLIPS.items()}


def write_tree(top: Path, clips: dict[str, bytes]) -> dict[str, bytes]:
    """A class-folder tree of the clips; relative path -> its bytes."""
    want = {}
    for label, names in TREE.items():
        (top / label).mkdir(parents=True)
        for name in names:
            relative = f"{label}/{name}{CLIPS[name][1]}"
            (top / relative).write_bytes(clips[name])
            want[relative] = clips[name]
    (top / "README.txt").write_text("not a clip")
    return want


def check_meta(ds: Any, field: str) -> None:
    """Each clip's meta row is what decode/video.probe says of its stored bytes."""
    meta = ds.columns.meta(field)
    assert meta.shape == (len(ds), len(META))
    for i in range(len(ds)):
        info = video.probe(ds.sample(i)[field])
        assert meta[i].tolist() == [
            info.width, info.height, info.frames, info.time_base.numerator,
            info.time_base.denominator, info.duration_pts, len(info.keyframes),
            int(info.pts[0]), video.frame_step(info)]


def packdata(*args: str) -> subprocess.CompletedProcess[str]:
    """`packdata ARGS` in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", *args],
                          capture_output=True, text=True, timeout=300, check=False)


def write_clips(folder: Path, clips: dict[str, bytes]) -> list[Path]:
    """Each of CLIPS in folder, as NAME.SUFFIX; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (_, suffix) in CLIPS.items():
        paths.append(folder / f"{name}{suffix}")
        paths[-1].write_bytes(clips[name])
    return paths
