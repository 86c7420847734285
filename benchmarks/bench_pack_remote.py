"""Packing to and from object storage: the same tree packed (local engine) to a local folder,
to s3:// on moto's S3 server on loopback (each shard uploaded by its task, manifest.json last),
and from its copy at s3:// to a local folder; rounds alternate, medians reported.

    python benchmarks/bench_pack_remote.py --files 1000 --rounds 5 --workers 2
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_remote import start_s3
from imagegen import make_tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-size", type=int, default=1 << 20)
    args = parser.parse_args(argv)
    import s3fs

    from fastloader.pack.pipeline.tree import pack

    proc, _ = start_s3()
    work = Path(tempfile.mkdtemp(prefix="bench-pack-remote-"))
    try:
        make_tree(work / "src", classes=10, per_class=args.files // 10)
        fs = s3fs.S3FileSystem()
        fs.mkdir("bench")
        fs.put(str(work / "src") + "/", "bench/tree/", recursive=True)
        source_bytes = sum(p.stat().st_size for p in (work / "src").rglob("*") if p.is_file())
        runs = {
            "local -> local": lambda: pack(work / "src", work / "out.lmdb", overwrite=True,
                                           shard_size=args.shard_size, workers=args.workers),
            "local -> s3://": lambda: pack(work / "src", "s3://bench/out.lmdb",
                                           overwrite=True, shard_size=args.shard_size,
                                           workers=args.workers),
            "s3:// -> local": lambda: pack("s3://bench/tree", work / "out3.lmdb",
                                           overwrite=True, shard_size=args.shard_size,
                                           workers=args.workers),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():  # alternating: one of each per round
                began = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - began)
        print(f"{args.files} files, {source_bytes / 1e6:.1f} MB, workers={args.workers}, "
              f"shard_size={args.shard_size}, {args.rounds} rounds (moto on loopback)")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:16s} median {median:6.2f} s  ({args.files / median:7.0f} files/s)  "
                  f"runs {', '.join(f'{v:.2f}' for v in values)}")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
