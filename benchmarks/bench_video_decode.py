"""Video window decode, one clip at a time: clips/s for 16-frame windows (stride 2) taken by
seeking to the keyframe before the window (decode/video.py) against decoding from the start,
and against torchcodec where it imports; decoder threads 1 and 2 and FFmpeg's thread types;
interleaved rounds, medians. `--gil` measures whether PyAV's decode releases the GIL (a Python
thread spinning beside a decode loop keeps its rate only if it does)."""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import av
import numpy as np

from fastloader.decode import video
from harness import gil_kept

FRAMES, STRIDE = 16, 2


def make_clips(count: int, seconds: float, width: int, height: int, rate: int,
               gop: int) -> list[bytes]:
    """H.264 MP4 clips of a moving gradient, in memory; gop frames between keyframes."""
    clips = []
    y, x = np.mgrid[0:height, 0:width]
    for i in range(count):
        buffer = io.BytesIO()
        with av.open(buffer, mode="w", format="mp4") as out:
            stream = out.add_stream("libx264", rate=rate)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.codec_context.gop_size = gop
            stream.options = {"preset": "veryfast", "crf": "23"}
            for k in range(int(seconds * rate)):
                rgb = np.stack([(x + 3 * k + i) % 256, (y + 2 * k) % 256,
                                (x + y + k * 5) % 256], -1).astype(np.uint8)
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                frame.pts, frame.time_base = k, Fraction(1, rate)
                out.mux(stream.encode(frame))
            out.mux(stream.encode())
        clips.append(buffer.getvalue())
    return clips


def from_start(data: bytes, pts: np.ndarray, threads: int) -> np.ndarray:
    """The usual loop: decode from the first frame, keep the wanted pts, stop after the last."""
    wanted, last, out = set(pts.tolist()), int(pts.max()), []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        stream.thread_count, stream.thread_type = threads, "SLICE"
        for frame in container.decode(stream):
            if frame.pts in wanted:
                out.append(frame.to_ndarray(format="rgb24"))
            if frame.pts >= last:
                break
    return np.stack(out)


def torchcodec_leg(threads: int) -> Callable[[bytes, np.ndarray, Any], Any] | None:
    """torchcodec's exact-mode frame lookup by index, or None if it does not import."""
    try:
        from torchcodec.decoders import VideoDecoder
    except Exception as exc:  # any failure to load (no FFmpeg, torch ABI) is "not available"
        print(f"torchcodec: not available ({type(exc).__name__}: {str(exc)[:120]})")
        return None

    def run(data: bytes, pts: np.ndarray, info: video.VideoInfo) -> Any:
        index = np.searchsorted(info.pts, pts).tolist()
        decoder = VideoDecoder(data, seek_mode="exact", num_ffmpeg_threads=threads)
        return decoder.get_frames_at(indices=index).data

    return run


def legs(infos: list[video.VideoInfo]) -> dict[str, Callable[[bytes, np.ndarray, Any], Any]]:
    """Every way of decoding a window, by name."""
    table: dict[str, Callable[[bytes, np.ndarray, Any], Any]] = {}
    for threads in (1, 2):
        for kind in ("SLICE", "FRAME", "AUTO") if threads > 1 else ("SLICE",):
            table[f"seek+window t={threads} {kind}"] = (
                lambda d, p, i, t=threads, k=kind: video.decode_clip(d, i, p, threads=t,
                                                                     thread_type=k))
        table[f"from start t={threads}"] = lambda d, p, i, t=threads: from_start(d, p, t)
        tc = torchcodec_leg(threads)
        if tc is not None:
            table[f"torchcodec exact t={threads}"] = tc
    return table


def bench(clips: list[bytes], rounds: int) -> None:
    infos = [video.probe(data) for data in clips]
    rng = np.random.default_rng(0)
    plans = [video.plan_clip(info, FRAMES, stride=STRIDE,
                             start=float(rng.uniform(0, max(0.0, info.duration - 1.3))))
             for info in infos]
    table = legs(infos)
    rates: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(rounds):
        for name, run in table.items():
            start = time.perf_counter()
            for data, plan, info in zip(clips, plans, infos, strict=True):
                run(data, plan, info)
            rates[name].append(len(clips) / (time.perf_counter() - start))
    base = statistics.median(rates["from start t=1"])
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:28s} {median:7.1f} clips/s  ({median / base:4.2f}x from start t=1)"
              f"  rounds {[round(v, 1) for v in values]}")


def gil_probe(clips: list[bytes]) -> None:
    infos = [video.probe(data) for data in clips]
    plans = [video.plan_clip(info, FRAMES, stride=STRIDE) for info in infos]
    blob = b"\x00" * (1 << 29)
    calls = {
        "decode_clip loop (decode + rgb24)": lambda: [
            video.decode_clip(d, i, p) for d, i, p in zip(clips, infos, plans, strict=True)],
        "control: bytes.find over 512 MiB": lambda: blob.find(b"\x01"),
    }
    for name, call in calls.items():
        print(f"{name}: a Python thread beside it ran at {gil_kept(call):.2f}x its solo rate"
              " (near 0 if the call holds the GIL)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clips", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--size", default="320x240")
    parser.add_argument("--fps", type=int, default=25)
    parser.add_argument("--gop", type=int, default=25, help="frames between keyframes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gil", action="store_true", help="only the GIL probe")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    start = time.perf_counter()
    clips = make_clips(args.clips, args.seconds, width, height, args.fps, args.gop)
    print(f"{args.clips} clips {args.size} {args.seconds}s {args.fps} fps gop {args.gop}:"
          f" made in {time.perf_counter() - start:.1f}s; load average {os.getloadavg()};"
          f" PyAV {av.__version__}, FFmpeg {av.library_versions['libavcodec']}")
    if args.gil:
        gil_probe(clips)
        return
    bench(clips, args.rounds)
    print(f"load average after: {os.getloadavg()}", file=sys.stdout)


if __name__ == "__main__":
    main()
