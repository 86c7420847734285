"""Remote decode workers (FastLoader(..., remote=Remote(...))): the trainer confined to one core
(taskset -c 0) decoding alone, against the same trainer plus one Ray worker node confined to the
other core (taskset -c 1), and against that worker alone (local=False). JPEG, RandomResizedCrop
224 + flip, batch 64; video clips too (16 frames at stride 2, RandomResizedCrop 112, batch 8);
with --views, DINO's multi-crop views of the same images too (2 global crops at 224 and 8 local
ones at 96 with DINO's colour ops, batch 64: views=, decoded once a record).

Interleaved rounds in one trainer process, after one local pass over each dataset (the page
cache filled); each row times `--batches` batches after `--warmup` (a new loader's actor makes
its first batches slower). Medians and same-round ratios against local decode: images/s, the
trainer's CPU seconds a batch (its whole process: producer, copies, consumer), bytes a sample
over the wire (the workers' payloads), batches taken back from the worker and the trainer's
wait for it a batch, the trainer's own decode and read+plan a batch it made itself, the
trainer's RSS over 10 passes, and whether the object store spilled. The Ray node is
`ray start --head --num-cpus=1` under taskset -c 1, on 127.0.0.1; this script
starts and stops it.

    python benchmarks/bench_remote_workers.py            # writes results/remote_workers.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "remote_workers.json"
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           # the driver keeps the head's 127.0.0.1 (Ray rewrites loopback addresses otherwise)
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
MODES = ("local", "local + 1 worker", "1 worker only")


# ---------------------------------------------------------------- data (in the parent)


def make_images(root: Path, count: int) -> Path:
    """count photo-like JPEGs (benchmarks/make_images.py), packed to root/images-COUNT.lmdb."""
    sys.path.insert(0, str(BENCH))
    import fastloader
    import make_images as gen  # the suite's generator: 300-800 px photos at quality 90
    packed = root / f"images-{count}.lmdb"  # by count: a cached smaller set is not reused
    if not packed.exists():
        gen.ensure_tree(root / f"images-{count}", count, classes=10)
        fastloader.pack(root / f"images-{count}", packed, workers=1)
    return packed


def make_videos(root: Path, count: int) -> Path:
    """count 2 s 320x240 H.264 clips at 25 fps, packed to root/videos-COUNT.lmdb."""
    import av

    import fastloader
    packed = root / f"videos-{count}.lmdb"  # by count, as the images
    if packed.exists():
        return packed
    rng = np.random.default_rng(0)
    samples = []
    for k in range(count):
        path = root / f"clip{k}.mp4"
        with av.open(str(path), mode="w", format="mp4") as out:
            stream = out.add_stream("libx264", rate=25)
            stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
            stream.options = {"preset": "veryfast", "crf": "23"}
            ground = rng.integers(0, 256, (240, 640, 3), dtype=np.uint8)
            for f in range(50):
                frame = av.VideoFrame.from_ndarray(
                    np.ascontiguousarray(ground[:, 4 * f:4 * f + 320]), format="rgb24")
                frame.pts, frame.time_base = f, Fraction(1, 25)
                out.mux(stream.encode(frame))
            out.mux(stream.encode())
        samples.append({"video": path.read_bytes(), "label": k % 5})
    fastloader.pack(samples, packed, fields={"video": "video", "label": "int"}, workers=1)
    return packed


# ---------------------------------------------------------------- the trainer (taskset -c 0)


def _memory() -> tuple[int, int]:
    """(RSS, USS): USS leaves out shared pages, such as the object store's mapped ones."""
    import psutil
    info = psutil.Process().memory_full_info()
    return int(info.rss), int(info.uss)


def _loader(kind: str, path: str, mode: str, address: str) -> Any:
    import fastloader
    remote = None
    if mode != "local":
        remote = fastloader.Remote(workers=1, address=address, local=mode.startswith("local"))
    if kind == "images":
        return fastloader.FastLoader(
            path, batch_size=64, shuffle=True, device="cpu", num_threads=1, remote=remote,
            transforms=[fastloader.RandomResizedCrop(224), fastloader.RandomHorizontalFlip()])
    if kind == "dino views":  # bench_recipes.py's DINO views (docs/views.md's recipe)
        from bench_recipes import fastloader_views
        return fastloader.FastLoader(path, batch_size=64, shuffle=True, device="cpu",
                                     num_threads=1, remote=remote,
                                     **fastloader_views("dino"))
    return fastloader.FastLoader(
        path, batch_size=8, shuffle=True, device="cpu", num_threads=1, remote=remote,
        video=fastloader.Video(frames=16, stride=2),
        transforms=[fastloader.RandomResizedCrop(112), fastloader.RandomHorizontalFlip()])


def _measure(loader: Any, batches: int, warmup: int) -> dict[str, float]:
    """`batches` batches after `warmup` (the workers started, their dataset open, their first
    batches, which pay for the actor's first decode, delivered and their seconds measured)."""
    def endless() -> Any:
        while True:
            yield from loader
    stream = endless()
    for _ in range(warmup):
        next(stream)
    before = loader.stats()
    wall, cpu = time.perf_counter(), time.process_time()
    images = 0
    for _ in range(batches):
        batch = next(stream)
        first = batch[0]
        # images: a tensor; video: (clips, ...); views: a list of view batches
        images += len(first[0] if isinstance(first, (tuple, list)) else first)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = loader.stats()
    def total(field: str, stats: Any) -> float:  # 0 for a field an older fastloader lacks
        return sum(getattr(w, field, 0) for w in stats.remote_workers if w.worker != "local")

    sent = total("bytes", after) - total("bytes", before)
    remote = sum(w.batches for w in after.remote_workers if w.worker != "local") - sum(
        w.batches for w in before.remote_workers if w.worker != "local")
    return {"images_per_s": images / wall, "cpu_ms_per_batch": 1000 * cpu / batches,
            "bytes_per_sample": sent / max(1, remote * images / batches),
            "remote_share": remote / batches,
            # the trainer's own decode (decode threads' wall) a batch it made itself
            "local_decode_ms": 1000 * (after.decode_s - before.decode_s) / max(1, batches - remote),
            "local_prepare_ms": 1000 * (after.read_s + after.plan_s - before.read_s
                                        - before.plan_s) / max(1, batches - remote),
            "taken_back": total("taken_back", after) - total("taken_back", before),
            "wait_s_per_batch": (total("wait_s", after) - total("wait_s", before)) / batches,
            # the worker's busy seconds (its batches' read, plan, decode) over the wall
            "worker_busy_share": (total("decode_s", after) - total("decode_s", before)) / wall}


def _passes(kind: str, path: str, address: str, passes: int) -> list[tuple[int, int]]:
    """The trainer's (RSS, USS) after each of `passes` whole passes with a worker beside it."""
    loader = _loader(kind, path, "local + 1 worker", address)
    rss = []
    with loader:
        for _ in range(passes):
            for _ in loader:
                pass
            rss.append(_memory())
    return rss


def trainer(args: argparse.Namespace) -> None:
    import ray
    ray.init(address=args.address, include_dashboard=False, log_to_driver=False)
    out: dict[str, Any] = {"rounds": []}
    kinds = [("images", args.images_path, args.batches)]
    if args.videos_path:
        kinds.append(("video", args.videos_path, args.video_batches))
    if args.view_batches:
        kinds.append(("dino views", args.images_path, args.view_batches))
    for kind, path, batches in kinds:
        with _loader(kind, path, "local", args.address) as loader:
            for _ in loader:  # every record read once: no row pays for filling the page cache
                pass
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))  # interleaved, alternated
            for mode in order:
                with _loader(kind, path, mode, args.address) as loader:
                    row = _measure(loader, batches, args.warmup)
                out["rounds"].append({"kind": kind, "round": r, "mode": mode, **row})
                print(json.dumps(out["rounds"][-1]), file=sys.stderr, flush=True)
    out["rss_10_passes"] = _passes("images", args.images_path, args.address, 10)
    print(json.dumps(out))


# ---------------------------------------------------------------- the parent


def _ray_node(port: int, temp_dir: Path) -> subprocess.Popen[bytes]:
    """The worker node: a Ray head of one CPU on core 1 (`ray start --block`, in its own
    process group, which _stop ends: never `ray stop`, which ends every Ray on the machine);
    its session (and any spilled object) under temp_dir. Returns once its GCS answers."""
    node = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "-m", "ray.scripts.scripts", "start", "--head",
         "--block", "--num-cpus=1", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}"],
        env={**os.environ, **RAY_ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                time.sleep(2)  # the raylet registers after the GCS listens
                return node
        time.sleep(0.5)
    _stop(node)
    raise RuntimeError(f"the Ray node did not start on 127.0.0.1:{port}")


def _stop(node: subprocess.Popen[bytes]) -> None:
    """End the node's process group (its GCS and raylet; their workers follow the raylet)."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, sig)
        try:
            node.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _spilled(temp_dir: Path) -> int:
    """Bytes the object store spilled to disk (Ray writes them under ray_spilled_objects*)."""
    return sum(p.stat().st_size for p in temp_dir.rglob("*")
               if p.is_file() and "ray_spilled_objects" in str(p))


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians by (kind, mode), and same-round ratios against local decode."""
    table: dict[str, Any] = {}
    for kind in sorted({r["kind"] for r in rows}):
        local = {r["round"]: r for r in rows if r["kind"] == kind and r["mode"] == "local"}
        for mode in MODES:
            mine = [r for r in rows if r["kind"] == kind and r["mode"] == mode]
            table[f"{kind} / {mode}"] = {
                key: statistics.median(r[key] for r in mine) for key in mine[0]
                if key not in ("kind", "mode", "round")} | {
                "speed_ratio": statistics.median(
                    r["images_per_s"] / local[r["round"]]["images_per_s"] for r in mine),
                "cpu_ratio": statistics.median(
                    r["cpu_ms_per_batch"] / local[r["round"]]["cpu_ms_per_batch"] for r in mine)}
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 48 batches a pass: each pass's start and end cost a worker's batch or so (the workers
    # get a pass's batches once it begins), which a 12-batch pass would make a quarter of it
    parser.add_argument("--images", type=int, default=3072)
    parser.add_argument("--videos", type=int, default=192)  # 24 batches of 8 a pass
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=96)
    parser.add_argument("--video-batches", type=int, default=48)
    parser.add_argument("--warmup", type=int, default=8, help="batches before the timed ones")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "fl-remote")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument("--images-only", action="store_true", help="leave out the video rows")
    parser.add_argument("--views", action="store_true", help="add DINO's multi-crop views")
    parser.add_argument("--view-batches", type=int, default=24)
    parser.add_argument("--trainer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--images-path", help=argparse.SUPPRESS)
    parser.add_argument("--videos-path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.images, args.videos, args.rounds, args.batches, args.video_batches,
           args.warmup) < 1 or (args.views and args.view_batches < 1):
        parser.error("--images, --videos, --rounds, --batches, --video-batches, --view-batches "
                     "and --warmup must be >= 1")
    if args.trainer:
        trainer(args)
        return 0
    args.data.mkdir(parents=True, exist_ok=True)
    images = make_images(args.data, args.images)
    videos = None if args.images_only else make_videos(args.data, args.videos)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout
    load = [os.getloadavg(), uptime]
    port, temp_dir = 6390, Path(tempfile.mkdtemp(prefix="flrw"))
    node = _ray_node(port, temp_dir)
    try:
        run = subprocess.run(
            ["taskset", "-c", "0", sys.executable, __file__, "--trainer",
             f"--address=127.0.0.1:{port}", f"--images-path={images}",
             f"--videos-path={videos or ''}", f"--rounds={args.rounds}",
             f"--batches={args.batches}",
             f"--video-batches={args.video_batches}", f"--warmup={args.warmup}",
             f"--view-batches={args.view_batches if args.views else 0}"],
            env={**os.environ, **RAY_ENV}, capture_output=True, text=True, check=False)
        spilled = _spilled(temp_dir)
    finally:
        _stop(node)
    if run.returncode != 0:
        print(run.stderr[-4000:], file=sys.stderr)
        return 1
    out = json.loads(run.stdout.strip().splitlines()[-1])
    out["summary"] = _summary(out["rounds"])
    out["spilled_bytes"] = spilled
    out["load_before"] = load
    out["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    for name, row in out["summary"].items():
        print(f"{name:<28} {row['images_per_s']:8.1f}/s  x{row['speed_ratio']:.2f}  "
              f"cpu {row['cpu_ms_per_batch']:7.1f} ms/batch (x{row['cpu_ratio']:.2f})  "
              f"{row['bytes_per_sample']:9.0f} B/sample  remote {row['remote_share']:.0%}")
    print("RSS / USS over 10 passes (MiB):",
          [f"{r / 2**20:.0f}/{u / 2**20:.0f}" for r, u in out["rss_10_passes"]])
    print("object store spilled:", out["spilled_bytes"], "bytes")
    print("load before:", uptime.strip(), "| after:", out["uptime_after"].strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
