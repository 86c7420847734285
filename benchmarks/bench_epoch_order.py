"""A rank's epoch order at 10^6..10^8 samples: the time to draw it and the memory it takes.

Each measurement runs in a fresh subprocess: the interpreter with fastloader's sampler imported
is the baseline; the row is the peak RSS above it (VmHWM - VmRSS before) and the wall time of
`EpochSampler.indices()` for rank 0 of `--world` ranks, with the order kind forced to the
PCG64 permutation (every rank builds all n, keeps n / W) or to the seeded bijection (each rank
evaluates its own positions only). Synthetic: only the sample count matters here, no dataset is
opened. `--repeat` runs each row that many times (interleaved rounds) and reports the median
(min-max); JSON lines (an env record, a run record per measurement, a summary per row) go
to `--out`.

    python benchmarks/bench_epoch_order.py --sizes 1000000,10000000 --world 1,8,512
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from harness import env_line, environment, spread_text, summarize

CHILD = """
import json, sys, time
from fastloader.loader.order.sampler import EpochSampler

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

n, world, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sampler = EpochSampler(n, seed=1, rank=0, world_size=world)
sampler.order_kind = kind
before = status("VmRSS:")
started = time.perf_counter()
share = sampler.indices()
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "peak_above": status("VmHWM:") - before,
                  "share": len(share)}))
"""


def measure(n: int, world: int, kind: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(n), str(world), kind],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--world", default="1,8,512")
    parser.add_argument("--kinds", default="permutation,bijection")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "epoch_order.jsonl")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke check: 100,000 samples, 1 and 8 ranks, one round")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.world, args.repeat = "100000", "1,8", 1
    rows = [(int(n), int(w), k) for n in args.sizes.split(",")
            for w in args.world.split(",") for k in args.kinds.split(",")]
    env = environment()
    records: list[dict] = [{"type": "env", **env}]
    runs: dict[tuple[int, int, str], list[dict[str, float]]] = {row: [] for row in rows}
    for round_index in range(args.repeat):  # interleaved: each round measures every row once
        for row in rows:
            result = measure(*row)
            runs[row].append(result)
            records.append({"type": "run", "round": round_index, "samples": row[0],
                            "world": row[1], "order": row[2], **result})
    print("| samples | world | order | rank's share | indices() ms | peak RSS above baseline "
          "MB |")
    print("|---|---|---|---|---|---|")
    for (n, world, kind), results in runs.items():
        ms = summarize([r["seconds"] * 1000 for r in results])
        mb = summarize([r["peak_above"] / 2**20 for r in results])
        records.append({"type": "summary", "samples": n, "world": world, "order": kind,
                        "ms": ms, "peak_above_mb": mb})
        print(f"| {n:,} | {world} | {kind} | {int(results[0]['share']):,} | "
              f"{spread_text(ms)} | {spread_text(mb, 1)} |")
    print(f"\n{env_line(env)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


if __name__ == "__main__":
    main()
