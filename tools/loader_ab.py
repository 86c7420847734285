"""Interleaved A/B of the loader between two checkouts: each round runs every row once for A and
once for B, each in its own process (B first on odd rounds), so a shared machine's load lands on
both alike; reports each row's median samples/s and the median of the same-round B/A ratios.

A and B are Python interpreters whose `fastloader` is the checkout to compare (e.g. a venv
per git worktree). The datasets are made once, by B's interpreter, under --data.

    python tools/loader_ab.py A/.venv/bin/python B/.venv/bin/python --rounds 7 --seconds 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
TESTS = Path(__file__).resolve().parent.parent / "tests"

MAKE = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path[:0] = [{bench!r}, {tests!r}]
    import fastloader
    from audiogen import clip
    from make_images import ensure_tree
    from videogen import make_clip
    data = Path({data!r})
    if not (data / "flac.lmdb").exists():
        clips = [clip(16000, 2.0 + (k % 7), 1, "flac", seed=k) for k in range({clips})]
        fastloader.pack([{{"audio": c, "label": k % 5}} for k, c in enumerate(clips)],
                        data / "flac.lmdb", fields={{"audio": "audio", "label": "int"}})
    if not (data / "jpeg.lmdb").exists():
        ensure_tree(data / "tree", {images})
        fastloader.pack(str(data / "tree"), data / "jpeg.lmdb")
    if not (data / "coeffs.lmdb").exists():
        fastloader.pack(str(data / "tree"), data / "coeffs.lmdb", codec="coeffs")
    if not (data / "video.lmdb").exists():  # H.264, 320x240, 48 frames, a keyframe every 12
        videos = [make_clip(frames=48, width=320, height=240, rate=24, gop=12)
                  for _ in range({clips} // 4)]
        fastloader.pack([{{"video": v, "label": k % 5}} for k, v in enumerate(videos)],
                        data / "video.lmdb", fields={{"video": "video", "label": "int"}})
""")

RUN = textwrap.dedent("""
    import shutil, tempfile, time, fastloader
    row, path = {row!r}, {path!r}
    if row == "tree pack":  # packs/s of the image tree, one process a worker
        out, k = tempfile.mkdtemp(), 0
        start = time.perf_counter()
        while k == 0 or time.perf_counter() - start < {seconds}:
            fastloader.pack(path, out + f"/{{k}}.lmdb", workers=2)
            k += 1
        print(k * {images} / (time.perf_counter() - start))
        shutil.rmtree(out)
        raise SystemExit
    if row == "audio FLAC crops":
        kwargs = dict(batch_size=16, audio=fastloader.Audio(crop_seconds=2.0, random_crop=True))
    elif row == "video":
        kwargs = dict(batch_size=8, video=fastloader.Video(frames=8, stride=2),
                      transforms=[fastloader.RandomResizedCrop(112),
                                  fastloader.RandomHorizontalFlip()])
    else:
        kwargs = dict(batch_size=32, transforms=[fastloader.RandomResizedCrop(224),
                                                 fastloader.RandomHorizontalFlip()])
    with fastloader.FastLoader(path, shuffle=True, device="cpu", num_threads=2,
                               **kwargs) as loader:
        for _ in loader:  # a warm pass: threads, caches
            pass
        count, epoch, start = 0, 1, time.perf_counter()
        while time.perf_counter() - start < {seconds}:  # whole epochs, at least this long
            loader.set_epoch(epoch)
            epoch += 1
            for batch in loader:
                count += len(batch[1])
        print(count / (time.perf_counter() - start))
""")

ROWS = {"audio FLAC crops": "flac.lmdb", "JPEG": "jpeg.lmdb", "coeffs": "coeffs.lmdb",
        "video": "video.lmdb", "tree pack": "tree"}


def measure(python: str, row: str, path: Path, seconds: float, images: int) -> float:
    """One row's samples/s in a fresh process of that interpreter."""
    code = RUN.format(row=row, path=str(path), seconds=seconds, images=images)
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("a", help="A's python (the baseline)")
    parser.add_argument("b", help="B's python (the change)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="each measurement runs whole epochs (packs) for at least this long")
    parser.add_argument("--clips", type=int, default=200)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--data", type=Path, default=Path("/tmp/fastloader-loader-ab"))
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    subprocess.run([args.b, "-c", MAKE.format(bench=str(BENCH), tests=str(TESTS),
                                              data=str(args.data), clips=args.clips,
                                              images=args.images)], check=True)
    rates: dict[str, dict[str, list[float]]] = {r: {"A": [], "B": []} for r in args.rows}
    for number in range(args.rounds):
        for row in args.rows:
            order = [("A", args.a), ("B", args.b)]
            for side, python in order[::-1] if number % 2 else order:
                rates[row][side].append(measure(python, row, args.data / ROWS[row],
                                                args.seconds, args.images))
    report = {}
    for row, sides in rates.items():
        ratios = [b / a for a, b in zip(sides["A"], sides["B"], strict=True)]
        report[row] = {"A_median": round(statistics.median(sides["A"]), 1),
                       "B_median": round(statistics.median(sides["B"]), 1),
                       "B/A_median": round(statistics.median(ratios), 3),
                       "B/A_rounds": [round(r, 3) for r in ratios]}
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
