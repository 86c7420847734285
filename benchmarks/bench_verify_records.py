"""Cost of FastLoader(verify_records=True), the per-record crc32 check, against it off.

Same loader settings, the two modes alternating within each round (order flipped every round),
several passes per measurement after a warm-up pass; medians of wall and process CPU time and of
the per-round on/off ratio. Also times crc32 alone over the same records, in the same script.

    .venv/bin/python benchmarks/bench_verify_records.py --images 400 --rounds 11
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from pathlib import Path

import fastloader
from fastloader.pack.pipeline.tree import pack
from make_images import ensure_tree

REPO = Path(__file__).resolve().parent.parent


def one_run(dataset: Path, verify: bool, passes: int, threads: int) -> tuple[float, float]:
    """(wall s, process CPU s) of `passes` passes after a warm-up pass."""
    loader = fastloader.FastLoader(
        str(dataset), batch_size=50, shuffle=True, device="cpu", num_threads=threads,
        prefetch=2, verify_records=verify,
        transforms=[fastloader.RandomResizedCrop(224), fastloader.RandomHorizontalFlip()])
    with loader:
        for _ in loader:
            pass
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(passes):
            for _ in loader:
                pass
        return time.perf_counter() - wall, time.process_time() - cpu


def crc_alone(dataset: Path, passes: int) -> float:
    """Median CPU seconds of crc32 over every record, `passes` times (9 repeats)."""
    with fastloader.open_dataset(dataset) as ds:
        records = [bytes(ds.record(i)) for i in range(len(ds))]
    times = []
    for _ in range(9):
        start = time.process_time()
        for _ in range(passes):
            for record in records:
                zlib.crc32(record)
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--passes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=REPO / "bench_data" / "verify_records")
    args = parser.parse_args()
    tree, dataset = args.data / "images", args.data / "d.lmdb"
    if ensure_tree(tree, args.images, classes=4) or not dataset.exists():
        pack(tree, dataset, overwrite=True)
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for r in range(args.rounds):
        for verify in ((False, True) if r % 2 == 0 else (True, False)):
            runs[verify].append(one_run(dataset, verify, args.passes, args.threads))
    for k, what in ((0, "wall"), (1, "cpu")):
        off = [run[k] for run in runs[False]]
        on = [run[k] for run in runs[True]]
        ratio = statistics.median(b / a for a, b in zip(off, on, strict=True))
        print(f"{what}: median off {statistics.median(off):.3f} s, on {statistics.median(on):.3f}"
              f" s, median per-round ratio on/off {ratio:.4f}")
    crc = crc_alone(dataset, args.passes)
    base = statistics.median(run[1] for run in runs[False])
    with fastloader.open_dataset(dataset) as ds:
        mean_kb = float(ds.lengths.mean()) / 1024
    print(f"crc32 alone over the same records ({mean_kb:.0f} KB mean): {crc * 1e3:.1f} ms CPU "
          f"= {100 * crc / base:.2f}% of the loader's median CPU with the check off")


if __name__ == "__main__":
    main()
