"""Video clips, side by side: FastLoader(video=) over a packed LMDB against the torch DataLoader a
user writes (a Dataset over the .mp4 files of a Kinetics-style class-folder tree whose workers
open each file with PyAV, decode a 16-frame window at stride 2 from a random start, convert to
RGB, one RandomResizedCrop(112) + flip per clip), decoding from the start or seeking to the
keyframe first; torchcodec where it imports. Same window, crop and batch; interleaved rounds,
medians, same-round ratios against the best DataLoader row. `--pack` times packing the tree
instead (seconds per hour of video, bytes stored against the source's)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch

from baseline import rrc_params
from harness import (
    RESULTS_DIR,
    JsonlWriter,
    RunResult,
    best_dataloader,
    env_line,
    environment,
    format_table,
    paired_speedups,
    run_interleaved,
    run_row,
    spread_text,
    summary_row,
    timed_iteration,
)

REPO = Path(__file__).resolve().parent.parent
FRAMES, STRIDE, SIZE = 16, 2, 112
Factory = Callable[[], RunResult]
PACK_WAYS = ("packdata CLI", "fastloader.pack()")


# ---------------------------------------------------------------- data


@dataclass(frozen=True)
class ClipSpec:
    """What the generated tree holds; written beside it, so a tree made otherwise is remade."""

    count: int = 200
    classes: int = 10
    width: int = 340
    height: int = 256
    fps: int = 25
    seconds: tuple[float, float] = (2.0, 5.0)
    gop_seconds: tuple[float, float] = (1.0, 2.0)
    seed: int = 0


def _texture(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A smooth colour field with fine grain, twice the frame's size: panned, it is a moving
    camera over a scene with both flat regions and detail (an encoder's usual work)."""
    coarse = rng.integers(0, 256, (height // 16 + 2, width // 16 + 2, 3), dtype=np.uint8)
    smooth = np.repeat(np.repeat(coarse, 16, axis=0), 16, axis=1)[:height, :width].astype(np.int16)
    grain = rng.integers(-12, 13, (height, width, 3), dtype=np.int16)
    return np.clip(smooth + grain, 0, 255).astype(np.uint8)


def encode_clip(path: Path, spec: ClipSpec, rng: np.random.Generator) -> float:
    """One H.264 MP4 of random length and keyframe interval; returns its seconds."""
    seconds = float(rng.uniform(*spec.seconds))
    gop = round(float(rng.uniform(*spec.gop_seconds)) * spec.fps)
    height, width = spec.height, spec.width
    ground = _texture(rng, 2 * height, 2 * width)
    velocity = rng.uniform(-3, 3, 2)
    frames = int(seconds * spec.fps)
    with av.open(str(path), mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=spec.fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = gop
        stream.options = {"preset": "veryfast", "crf": "23", "sc_threshold": "0"}
        for k in range(frames):
            top = int(height / 2 + velocity[0] * k) % height
            left = int(width / 2 + velocity[1] * k) % width
            rgb = ground[top:top + height, left:left + width].copy()
            side = height // 4
            y, x = (k * 4) % (height - side), (k * 6) % (width - side)
            rgb[y:y + side, x:x + side] = (255 - 3 * k % 256, 40, 200)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = k, Fraction(1, spec.fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return frames / spec.fps


def ensure_clips(root: Path, spec: ClipSpec) -> list[tuple[Path, int]]:
    """(path, label) of a class-folder tree of spec's clips under root, made unless there (a
    packed copy of an older tree beside it, NAME.lmdb, is removed with it)."""
    stamp = root / ".clipspec.json"
    wanted = json.dumps(asdict(spec), sort_keys=True)
    if not (stamp.exists() and stamp.read_text() == wanted):
        if root.exists():
            if not stamp.exists():
                raise FileExistsError(f"{root} exists and was not made by this script; "
                                      "pass another --data folder")
            shutil.rmtree(root)
        shutil.rmtree(packed_path(root), ignore_errors=True)
        rng = np.random.default_rng(spec.seed)
        start, total = time.perf_counter(), 0.0
        for i in range(spec.count):
            folder = root / f"class_{i % spec.classes:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            total += encode_clip(folder / f"{i:05d}.mp4", spec, rng)
        stamp.write_text(wanted)
        print(f"made {spec.count} clips ({total / 60:.1f} min of video) in "
              f"{time.perf_counter() - start:.0f} s under {root}", flush=True)
    return tree_clips(root)


def packed_path(root: Path) -> Path:
    """Where the tree's packed copy goes: NAME.lmdb beside it."""
    return root.parent / (root.name + ".lmdb")


def tree_clips(root: Path) -> list[tuple[Path, int]]:
    """(path, label) of every .mp4 under root's class folders, labels by sorted folder name."""
    classes = sorted(p for p in root.iterdir() if p.is_dir())
    return [(path, label) for label, folder in enumerate(classes)
            for path in sorted(folder.glob("*.mp4"))]


def pack_clips(clips: list[tuple[Path, int]], dst: Path) -> float:
    """Pack the clips with fastloader.pack() (video + label); returns the seconds it took."""
    import fastloader

    start = time.perf_counter()
    fastloader.pack([{"video": str(p), "label": label} for p, label in clips], dst,
                    fields={"video": "video", "label": "int"})
    return time.perf_counter() - start


# ---------------------------------------------------------------- the DataLoader baseline


def crop_flip(frames: np.ndarray) -> torch.Tensor:
    """One RandomResizedCrop(112) and flip for the whole clip, as torchvision's v2 transforms
    do on a uint8 video tensor: [T, H, W, 3] -> [T, 3, 112, 112] uint8, bilinear, antialiased."""
    clip = torch.from_numpy(frames).permute(0, 3, 1, 2)
    top, left, h, w = rrc_params(clip.shape[2], clip.shape[3])
    clip = torch.nn.functional.interpolate(clip[:, :, top:top + h, left:left + w],
                                           size=(SIZE, SIZE), mode="bilinear", antialias=True)
    if torch.rand(1).item() < 0.5:
        clip = clip.flip(-1)
    return clip.contiguous()


def window(stream: Any) -> tuple[int, int]:
    """(first frame index, frames in the clip) for a random window, from the stream's header."""
    total = stream.frames or int(float(stream.duration * stream.time_base) * stream.average_rate)
    span = (FRAMES - 1) * STRIDE + 1
    first = int(torch.randint(0, max(1, total - span + 1), (1,)).item())
    return first, total


def decode_from_start(path: Path) -> np.ndarray:
    """What most user code does: decode from the first frame, keep every STRIDE-th frame of
    the window, stop after it; repeat the last frame if the clip ends first."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        first, _ = window(stream)
        wanted = set(range(first, first + FRAMES * STRIDE, STRIDE))
        frames: list[np.ndarray] = []
        for index, frame in enumerate(container.decode(stream)):
            if index in wanted:
                frames.append(frame.to_ndarray(format="rgb24"))
                if len(frames) == FRAMES:
                    break
    return np.stack(frames + frames[-1:] * (FRAMES - len(frames)))


def decode_seek(path: Path) -> np.ndarray:
    """The careful user: seek to the keyframe before the window's start (by pts), decode
    forward, keep the window's frames by timestamp."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        first, _ = window(stream)
        step = 1 / (float(stream.average_rate) * float(stream.time_base))  # pts per frame
        start_pts = round(first * step) + (stream.start_time or 0)
        container.seek(start_pts, stream=stream, backward=True, any_frame=False)
        frames: list[np.ndarray] = []
        next_pts = start_pts
        for frame in container.decode(stream):
            if frame.pts is None or frame.pts < next_pts - step / 2:
                continue
            frames.append(frame.to_ndarray(format="rgb24"))
            next_pts = frame.pts + STRIDE * step
            if len(frames) == FRAMES:
                break
    return np.stack(frames + frames[-1:] * (FRAMES - len(frames)))


def decode_torchcodec(path: Path) -> np.ndarray:
    """torchcodec's VideoDecoder (exact seek mode): the window's frames by index."""
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(str(path), seek_mode="exact", num_ffmpeg_threads=1,
                           dimension_order="NHWC")
    total = decoder.metadata.num_frames or len(decoder)
    first = int(torch.randint(0, max(1, total - (FRAMES - 1) * STRIDE), (1,)).item())
    index = [min(first + STRIDE * k, total - 1) for k in range(FRAMES)]
    return decoder.get_frames_at(indices=index).data.numpy()


DECODERS: dict[str, Callable[[Path], np.ndarray]] = {
    "PyAV from start": decode_from_start, "PyAV seek": decode_seek,
    "torchcodec": decode_torchcodec,
}


class ClipFiles(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The usual Dataset: one clip file per item, opened, decoded and cropped in the worker."""

    def __init__(self, clips: list[tuple[Path, int]], decode: Callable[[Path], np.ndarray]):
        self.clips, self.decode = clips, decode

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.clips[i]
        return crop_flip(self.decode(path)), label


def torchcodec_missing() -> str | None:
    """Why the torchcodec row cannot run here (the exact error), or None."""
    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401
    except Exception as exc:  # any failure to load (missing library, torch ABI) is "not here"
        return f"{type(exc).__name__}: {exc}"
    return None


# ---------------------------------------------------------------- rows


def _clip_count(batch: Any) -> int:
    return int(batch[0][0].shape[0] if isinstance(batch[0], (tuple, list)) else batch[0].shape[0])


def dataloader_config(clips: list[tuple[Path, int]], decoder: str, workers: int,
                      args: argparse.Namespace) -> Factory:
    dataset = ClipFiles(clips, DECODERS[decoder])

    def run() -> RunResult:
        def make() -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
            return torch.utils.data.DataLoader(
                dataset, batch_size=args.batch, shuffle=True, num_workers=workers,
                persistent_workers=True, pin_memory=False)

        return timed_iteration(make, _clip_count, args.clips_per_run, args.warmup)

    return run


def fastloader_config(path: Path, threads: int, args: argparse.Namespace,
                      seeds: Iterator[int]) -> Factory:
    import fastloader

    def run() -> RunResult:
        loader = fastloader.FastLoader(
            str(path), batch_size=args.batch, shuffle=True, seed=next(seeds),
            num_threads=threads, video=fastloader.Video(frames=FRAMES, stride=STRIDE),
            transforms=[fastloader.RandomResizedCrop(SIZE), fastloader.RandomHorizontalFlip()])
        try:
            return timed_iteration(lambda: loader, _clip_count, args.clips_per_run, args.warmup)
        finally:
            loader.close()

    return run


def video_decoder() -> str:
    """Which decoder the FastLoader rows' windows go through: the extension's module (and the
    FFmpeg it links) or PyAV."""
    from fastloader.decode import video_native

    native = video_native.module()
    if native is None:
        return f"PyAV {av.__version__}"
    return f"fastloader._video ({native.libavcodec_version})"


def fastloader_module() -> Any:
    import fastloader

    return fastloader


def build_configs(args: argparse.Namespace, clips: list[tuple[Path, int]],
                  packed: Path | None) -> tuple[dict[str, Factory], dict[str, str]]:
    """The rows to run, and the rows left out with why."""
    configs: dict[str, Factory] = {}
    skipped: dict[str, str] = {}
    decoders = [d for d in args.decoders if d != "torchcodec"]
    if "torchcodec" in args.decoders:
        missing = torchcodec_missing()
        if missing is None:
            decoders.append("torchcodec")
        else:
            skipped["DataLoader torchcodec"] = missing
    for decoder in decoders:
        for workers in args.workers:
            configs[f"DataLoader {decoder} workers={workers}"] = dataloader_config(
                clips, decoder, workers, args)
    if packed is not None and not hasattr(fastloader_module(), "Video"):
        skipped["FastLoader"] = "this fastloader has no Video (the video loader): --no-fastloader"
    elif packed is not None:
        seeds = iter(range(10**6))
        for threads in args.threads:
            configs[f"FastLoader threads={threads}"] = fastloader_config(
                packed, threads, args, seeds)
    return configs, skipped


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as markdown: clips/s, against the best DataLoader row (medians, same-round)."""
    best = best_dataloader(rows)
    header = ["loader", "clips/s median (min-max)", "vs best DataLoader",
              "same-round ratio median (min-max)", "peak RSS MB (sum)", "peak PSS MB",
              "CPU ms/clip", "first batch s"]
    body = []
    for row in rows:
        paired, first = row.get("paired_speedup"), row["first_batch_s"]
        body.append([
            row["name"], spread_text(row["img_per_s"], digits=1),
            f"{row['img_per_s']['median'] / best['img_per_s']['median']:.2f}x" if best else "-",
            spread_text(paired, digits=2) if paired else "-", f"{row['peak_rss_mb']:.0f}",
            f"{row['peak_pss_mb']:.0f}", f"{1000 * row['cpu_s_per_img']['median']:.1f}",
            f"{first['median']:.2f}" if first else "-"])
    return format_table(header, body)


def run_benchmark(args: argparse.Namespace, clips: list[tuple[Path, int]],
                  packed: Path | None) -> list[dict[str, Any]]:
    """Warm up, run all rows interleaved, write JSON lines, return the summary rows."""
    configs, skipped = build_configs(args, clips, packed)
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    with JsonlWriter(args.out, "video_loader") as writer:
        writer.write({"kind": "config", "batch": args.batch, "clips": len(clips),
                      "clips_per_run": args.clips_per_run, "warmup_batches": args.warmup,
                      "repeats": args.repeats, "frames": FRAMES, "stride": STRIDE, "size": SIZE})
        results = run_interleaved(
            configs, args.repeats,
            on_run=lambda name, i, run, usage: writer.write(run_row(name, i, run, usage)),
            on_pass=lambda stage, name: print(f"{stage}: {name}", flush=True))
        rows = [summary_row(name, runs) for name, runs in results.items()]
        best = best_dataloader(rows)
        paired = paired_speedups(results, best["name"]) if best else {}
        for row in rows:
            if best:
                row["paired_speedup"] = paired[row["name"]]
            writer.write(row)
        for name, reason in skipped.items():
            writer.write({"kind": "skipped", "name": name, "reason": reason})
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    return rows


# ---------------------------------------------------------------- packing cost


def _pack_once(how: str, clips: list[tuple[Path, int]], root: Path, dst: Path) -> float:
    """Seconds to pack the clips once: `packdata ROOT DST` in a fresh process (its start and
    imports included, as a user's command has them) or fastloader.pack() of the samples."""
    if how == "fastloader.pack()":
        return pack_clips(clips, dst)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", str(root), str(dst)],
                   check=True, capture_output=True)
    return time.perf_counter() - start


def pack_cost(clips: list[tuple[Path, int]], root: Path, work: Path, rounds: int,
              ways: tuple[str, ...] = PACK_WAYS) -> list[dict[str, Any]]:
    """Per way of packing (the packdata CLI on the class-folder tree, fastloader.pack() of
    (path, label) samples), interleaved rounds: seconds, seconds per hour of video (median),
    stored bytes against the source's."""
    from fastloader.decode.video import probe

    hours = sum(probe(p.read_bytes()).duration for p, _ in clips) / 3600
    source = sum(p.stat().st_size for p, _ in clips)
    seconds: dict[str, list[float]] = {how: [] for how in ways}
    stored: dict[str, int] = {}
    for k in range(rounds):
        for how in ways if k % 2 == 0 else ways[::-1]:
            dst = work / f"pack{k}.lmdb"
            seconds[how].append(_pack_once(how, clips, root, dst))
            stored[how] = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
            shutil.rmtree(dst)
    return [{"kind": "pack", "via": how, "clips": len(clips), "hours": hours,
             "source_bytes": source, "stored_bytes": stored[how], "seconds": seconds[how],
             "seconds_median": float(np.median(seconds[how])),
             "s_per_hour": float(np.median(seconds[how])) / hours} for how in ways]


# ---------------------------------------------------------------- where the loader's time goes


def stage_probe(clips: list[tuple[Path, int]], rounds: int) -> None:
    """The loader's per-clip steps on this data, one thread (ms/clip, medians of rounds), then
    the crop-and-scale decode on 1 and on 2 threads of this process: clips/s and the cores the
    process used (2 threads on 2 cores reach 2.0 only if the GIL lets them)."""
    from concurrent.futures import ThreadPoolExecutor

    from fastloader.decode import video

    datas = [p.read_bytes() for p, _ in clips]
    infos = [video.probe(d) for d in datas]
    rng = np.random.default_rng(0)
    plans = [info.pts[np.clip(int(rng.integers(0, max(1, info.frames - 31))) +
                              STRIDE * np.arange(FRAMES), 0, info.frames - 1)] for info in infos]
    height, width = infos[0].height, infos[0].width  # the central 80%, as a crop might take
    view = video.FrameView((height // 10, width // 10, height * 4 // 5, width * 4 // 5),
                           (SIZE, SIZE), True)
    steps: dict[str, Callable[[], Any]] = {
        "probe (demux the index)": lambda: [video.probe(d) for d in datas],
        "decode window, whole RGB frames": lambda: [
            video.decode_clip(d, i, p) for d, i, p in zip(datas, infos, plans, strict=True)],
        "decode window + crop/scale/flip (FrameView)": lambda: [
            video.decode_clip(d, i, p, view=view)
            for d, i, p in zip(datas, infos, plans, strict=True)]}
    for name, step in steps.items():
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            step()
            times.append((time.perf_counter() - start) / len(datas) * 1e3)
        print(f"{name}: {np.median(times):.2f} ms/clip (rounds {np.round(times, 2).tolist()})")
    decode = steps["decode window + crop/scale/flip (FrameView)"]
    for threads in (1, 2):
        with ThreadPoolExecutor(threads) as pool:
            rates, cores = [], []
            for _ in range(rounds):
                start, cpu = time.perf_counter(), time.process_time()
                list(pool.map(lambda _: decode(), range(threads)))
                wall = time.perf_counter() - start
                rates.append(threads * len(datas) / wall)
                cores.append((time.process_time() - cpu) / wall)
        print(f"{threads} thread(s) decoding with crop/scale/flip: {np.median(rates):.1f} "
              f"clips/s, {np.median(cores):.2f} cores used (rounds "
              f"{np.round(rates, 1).tolist()})")


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=REPO / "bench_data" / "video",
                        help="where the generated class-folder tree goes (NAME.lmdb beside it)")
    parser.add_argument("--count", type=int, default=200, help="clips in the generated tree")
    parser.add_argument("--size", default="340x256", help="WIDTHxHEIGHT of the clips")
    parser.add_argument("--seconds", type=float, nargs=2, default=(2.0, 5.0))
    parser.add_argument("--clips-per-run", type=int, default=160, help="timed clips per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2, help="untimed batches at each run start")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--decoders", nargs="+", default=list(DECODERS), choices=list(DECODERS))
    parser.add_argument("--no-fastloader", action="store_true",
                        help="DataLoader rows only (before the loader has video=)")
    parser.add_argument("--pack", action="store_true",
                        help="only the packing cost: `packdata SRC DST` and fastloader.pack()")
    parser.add_argument("--stages", action="store_true",
                        help="only the loader's per-clip steps and their thread scaling "
                             "(first 40 clips)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "video_loader.jsonl")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 12 tiny clips, one round, one row per kind")
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.size, args.seconds = 12, "96x64", (1.0, 1.5)
        args.clips_per_run, args.repeats, args.batch = 8, 1, 4
        args.workers, args.threads, args.warmup = [2], [2], 1
    if min(args.count, args.clips_per_run, args.repeats, args.batch) < 1 or args.warmup < 0:
        parser.error("--count, --clips-per-run, --repeats and --batch must be >= 1, "
                     "--warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    spec = ClipSpec(count=args.count, width=width, height=height, seconds=tuple(args.seconds))
    root = args.data if not args.quick else Path(tempfile.mkdtemp(prefix="vbench-")) / "video"
    try:
        clips = ensure_clips(root, spec)
        if args.stages:
            stage_probe(clips[:40], args.repeats)
            return 0
        if args.pack:
            with tempfile.TemporaryDirectory(dir=root.parent) as work:
                for cost in pack_cost(clips, root, Path(work), args.repeats):
                    print(json.dumps(cost))
            return 0
        packed = None
        if not args.no_fastloader:
            packed = packed_path(root)  # packed afresh: a copy an older fastloader made may
            shutil.rmtree(packed, ignore_errors=True)  # lack what this one's index holds
            print(f"packed {packed} in {pack_clips(clips, packed):.1f} s", flush=True)
        rows = run_benchmark(args, clips, packed)
        print(table(rows))
        print(env_line(environment()) + f", video windows by {video_decoder()}")
    finally:
        if args.quick:
            shutil.rmtree(root.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
