"""A weighted mix of two LMDB datasets against one dataset's rate, in the same run.

Rows (interleaved rounds, harness.run_interleaved): "one LMDB dataset": FastLoader(a.lmdb);
"mix of two LMDB datasets 1:1": FastLoader([a.lmdb, b.lmdb], weights=[1, 1],
epoch_size=len(a)), b a second packing of the same tree, so both rows decode the same kind
and number of images per pass with the same transforms (RandomResizedCrop(224), flip,
ImageNet normalize) and thread count. The ratio is the median of each round's mix/one rate.

    python benchmarks/bench_mix.py --images 2000 --repeat 5
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

from baseline import IMAGENET_MEAN, IMAGENET_STD
from bench_loader import ensure_packed
from harness import (
    JsonlWriter,
    env_line,
    environment,
    paired_speedups,
    run_interleaved,
    spread_text,
    summary_row,
    timed_iteration,
)
from make_images import ensure_tree

REPO = Path(__file__).resolve().parent.parent


def loader_row(data: Any, threads: int, batch: int, warmup: int, **mix: Any) -> Any:
    import fastloader

    seeds = itertools.count()

    def run() -> Any:
        loader = fastloader.FastLoader(
            data, batch_size=batch, shuffle=True, seed=next(seeds), num_threads=threads,
            transforms=[fastloader.RandomResizedCrop(224), fastloader.RandomHorizontalFlip()],
            normalize=(IMAGENET_MEAN, IMAGENET_STD), device="cpu", **mix)
        try:
            total = len(loader) * batch
            return timed_iteration(lambda: loader, lambda b: len(b[1]),
                                   total - warmup * batch, warmup)
        finally:
            loader.close()

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "bench_data" / "mix")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    tree = args.data / "images"
    ensure_tree(tree, args.images)
    a, b = args.data / "a.lmdb", args.data / "b.lmdb"
    ensure_packed(tree, a)
    ensure_packed(tree, b)
    configs = {
        "one LMDB dataset": loader_row(str(a), args.threads, args.batch, args.warmup),
        "mix of two LMDB datasets 1:1": loader_row(
            [str(a), str(b)], args.threads, args.batch, args.warmup, weights=[1, 1],
            epoch_size=args.images),
    }
    env = environment()
    results = run_interleaved(configs, args.repeat)
    ratios = paired_speedups(results, "one LMDB dataset")
    writer = JsonlWriter(args.out, "bench_mix") if args.out else None
    for name, runs in results.items():
        row = summary_row(name, runs)
        row["vs_one_dataset"] = ratios[name]
        print(f"{name:32s} {spread_text(row['img_per_s'])} img/s, "
              f"x{spread_text(ratios[name], 3)} of one dataset (same round)")
        if writer is not None:
            writer.write(json.loads(json.dumps(row, default=str)))
    print(env_line(env))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
