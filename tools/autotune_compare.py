"""Compare autotune against hand-picked num_threads/prefetch on a packed dataset (images/s).

python tools/autotune_compare.py DATASET [--epochs 2 8 --batch-size 32 --repeats 3]

Each setting runs `epochs` passes on a fresh FastLoader (RandomResizedCrop 224 + flip +
ImageNet normalize on the CPU, consumer drains as fast as it can), timed from the first
next() to the last, autotune's measuring batches included: a short run (few epochs) shows
what tuning costs, a long one where it settles. Settings are interleaved (round-robin)
`repeats` times per run length; the median images/s per setting is printed, with the
autotuner's final choice (threads/prefetch state) and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from fastloader.doctor.doctor import IMAGENET_NORMALIZE, transforms_for
from fastloader.loader.loader import FastLoader

SETTINGS: dict[str, dict[str, Any]] = {
    "threads=1 prefetch=2": {"num_threads": 1, "prefetch": 2},
    "threads=2 prefetch=2": {"num_threads": 2, "prefetch": 2},
    "threads=1 prefetch=4": {"num_threads": 1, "prefetch": 4},
    "threads=2 prefetch=4": {"num_threads": 2, "prefetch": 4},
    "threads=auto prefetch=2": {"num_threads": "auto", "prefetch": 2},
    "threads=auto prefetch=auto": {"num_threads": "auto", "prefetch": "auto"},
}


def run_once(path: str, options: dict[str, Any], epochs: int, batch_size: int) -> tuple[float,
                                                                                         str]:
    """Images/s over `epochs` passes and the final (threads, prefetch, state)."""
    with FastLoader(path, batch_size=batch_size, shuffle=True, device="cpu",
                    transforms=transforms_for("train", 224), normalize=IMAGENET_NORMALIZE,
                    **options) as loader:
        images = 0
        started = time.perf_counter()
        for _ in range(epochs):
            for batch, _labels in loader:
                images += batch.shape[0]
        seconds = time.perf_counter() - started
        stats = loader.stats()
    return images / seconds, f"{stats.num_threads}/{stats.prefetch} {stats.autotune_state}"


def compare(path: str, epochs: int, batch_size: int, repeats: int) -> None:
    """Run every setting `repeats` times, round-robin, and print the medians."""
    rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
    chosen: dict[str, str] = {}
    print(f"== {epochs} epochs per run, load average {os.getloadavg()[0]:.2f}")
    for repeat in range(repeats):
        for name, options in SETTINGS.items():
            rate, chosen[name] = run_once(path, options, epochs, batch_size)
            rates[name].append(rate)
            print(f"repeat {repeat}: {name:<28} {rate:8.1f} images/s  ({chosen[name]})")
    best = max(statistics.median(r) for name, r in rates.items() if "auto" not in name)
    print(f"\n{'setting':<28}{'median img/s':>14}{'runs':>20}{'vs best fixed':>15}  final")
    for name, values in rates.items():
        median = statistics.median(values)
        runs = " ".join(f"{v:.0f}" for v in values)
        print(f"{name:<28}{median:>14.1f}{runs:>20}{100 * median / best:>14.1f}%  "
              f"{chosen[name]}")
    print(f"load average after: {os.getloadavg()[0]:.2f}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--epochs", type=int, nargs="+", default=[2, 8],
                        help="run lengths to compare, in passes (default: 2 8)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for epochs in args.epochs:
        compare(args.dataset, epochs, args.batch_size, args.repeats)


if __name__ == "__main__":
    main()
