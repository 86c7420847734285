"""`make demo`: make a sample tree, pack it with packdata, race DataLoader against FastLoader."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench_loader import best_dataloader, ensure_packed, run_benchmark
from harness import env_line, environment, format_table, spread_text
from make_images import ensure_tree

REPO = Path(__file__).resolve().parent.parent
DEMO_DIR = REPO / "demo_data"
# torchvision does not install here: the DataLoader rows use PIL and the torchvision-style
# transforms written out in benchmarks/baseline.py, and the table says so.
BASELINE_LABEL = "DataLoader (PIL + baseline.py transforms)"


def shown_name(name: str) -> str:
    """A row's name as printed: DataLoader rows say what they decode and transform with."""
    if not name.startswith("DataLoader"):
        return name
    return BASELINE_LABEL + name.removeprefix("DataLoader")


def demo_table(rows: list[dict[str, Any]]) -> str:
    """DataLoader vs FastLoader: median img/s with spread, and the speed-up over the best
    DataLoader row."""
    best = best_dataloader(rows)
    if best is None:
        raise ValueError("the demo table needs at least one DataLoader row to compare against")
    base = best["img_per_s"]["median"]
    body = []
    for row in rows:
        ratio = row["img_per_s"]["median"] / base
        mark = "  <- best DataLoader" if row is best else ""
        body.append([
            shown_name(row["name"]), spread_text(row["img_per_s"]), f"{ratio:.2f}x{mark}",
            f"{row['peak_rss_mb']:.0f}", f"{row['peak_pss_mb']:.0f}",
        ])
    header = ["loader", "images/s median (min-max)", "speed-up", "peak RSS MB (sum)", "peak PSS MB"]
    return format_table(header, body)


def headline(rows: list[dict[str, Any]]) -> str:
    """One sentence: the best FastLoader row against the best DataLoader row."""
    best_dl = best_dataloader(rows)
    fast = [r for r in rows if r["name"].startswith("FastLoader")]
    if best_dl is None or not fast:
        return "no DataLoader/FastLoader pair to compare"
    best_fl = max(fast, key=lambda r: r["img_per_s"]["median"])
    ratio = best_fl["img_per_s"]["median"] / best_dl["img_per_s"]["median"]
    return (f"{best_fl['name']} ran {ratio:.2f}x the images/s of the best plain DataLoader "
            f"({shown_name(best_dl['name'])}) on this machine.")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=300, help="sample images to generate")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3],
                        help="DataLoader num_workers values (the best one is the baseline)")
    parser.add_argument("--dir", type=Path, default=DEMO_DIR, help="where the sample data lives")
    args = parser.parse_args(argv)
    if min(args.count, args.repeats, args.batch) < 1:
        parser.error("--count, --repeats and --batch must be >= 1")
    # The rest of bench_loader's options, fixed for a short demo.
    args.warmup = 1
    args.images = max(args.batch, (args.count // args.batch - args.warmup) * args.batch)
    args.threads, args.ceiling, args.dali = None, False, False
    args.out = args.dir / "demo.jsonl"  # demo_data/ is git-ignored: the demo dirties nothing
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    tree = args.dir / "images"
    print(f"== 1. sample tree: {args.count} ImageNet-like JPEGs in {tree}", flush=True)
    packed = {"LMDB": args.dir / "images.lmdb", "HDF5": args.dir / "images.h5"}
    import fastloader

    if fastloader.native_available():  # the coeffs codec needs the extension to pack and read
        packed["coeffs LMDB"] = args.dir / "images.coeffs.lmdb"
    if ensure_tree(tree, args.count, classes=10, seed=0):
        for path in packed.values():  # new images: the old packs are stale
            shutil.rmtree(path, ignore_errors=True)
    else:
        print("   (reusing the tree made earlier with the same parameters)")
    print(f"== 2. pack it with packdata ({', '.join(packed)})", flush=True)
    for label, path in packed.items():
        ensure_packed(tree, path, quiet=False, codec="coeffs" if label == "coeffs LMDB" else "jpeg")
    print(f"== 3. loader race: {args.repeats} interleaved rounds, batch {args.batch}, "
          f"RandomResizedCrop 224 + flip + normalize", flush=True)
    rows = run_benchmark(args, tree, packed)
    print()
    print(demo_table(rows))
    print()
    print(headline(rows))
    print(env_line(environment()))
    print(f"demo took {time.perf_counter() - t0:.0f} s; raw results in {args.out}. "
          "Full benchmark: see BENCHMARKS.md.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
