"""Interleaved A/B of two builds of fastloader._core (e.g. two libjpeg-turbo versions), in one
process, on benchmarks/bench_decode.py's native rows.

Both modules are loaded side by side (build them with different nanobind domains, e.g.
`-DCMAKE_CXX_FLAGS=-DNB_DOMAIN=a`, or their types collide); each row runs once per round for A
and for B, in bench_decode's rotating order, so a shared machine's load lands on both alike.
Reports median images/s (wall and per CPU-second) and the B/A ratio per row.

    python tools/jpeg_ab.py A/_core*.so B/_core*.so [--images 300 --repeats 5]
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from bench_decode import (  # noqa: E402
    DEFAULT_TREE,
    load_records,
    native_configs,
    rrc_boxes,
    tiled_configs,
)
from fastloader.decode import _native  # noqa: E402
from harness import run_interleaved  # noqa: E402
from make_images import ensure_tree  # noqa: E402


def load_core(path: Path) -> ModuleType:
    """Load one build of the extension as fastloader._core without registering it."""
    loader = importlib.machinery.ExtensionFileLoader("fastloader._core", str(path))
    spec = importlib.util.spec_from_file_location("fastloader._core", path, loader=loader)
    if spec is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules.pop("fastloader._core", None)
    return module


def use(core: ModuleType) -> None:
    """Make `core` the module fastloader's decode functions call."""
    _native._module, _native._loaded, _native._reason = core, True, ""


def configs_for(label: str, core: ModuleType, records: list, boxes, flips) -> dict:
    """bench_decode's native and tiled rows, each switching to `core` before it runs."""
    use(core)  # the rows' BatchDecoders bind the current module when they are made
    rows = {**native_configs(records, boxes, flips), **tiled_configs(records, boxes, flips)}

    def bound(fn: Callable) -> Callable:
        def run():
            use(core)
            return fn()

        return run

    return {f"{label}: {name}": bound(fn) for name, fn in rows.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    ensure_tree(DEFAULT_TREE, 1000, seed=0)
    records = load_records(DEFAULT_TREE, args.images)
    boxes, flips = rrc_boxes(records, 0)
    cores = {"A": load_core(args.a), "B": load_core(args.b)}
    configs: dict = {}
    for label, core in cores.items():
        configs.update(configs_for(label, core, records, boxes, flips))
    results = run_interleaved(configs, args.repeats)
    print(f"A = {args.a}\nB = {args.b}\n{args.images} images, {args.repeats} rounds, medians")
    print(f"{'row':62s} {'A img/s':>8s} {'B img/s':>8s} {'B/A':>6s} {'A /cpu-s':>9s} "
          f"{'B /cpu-s':>9s} {'B/A':>6s}")  # fmt: skip
    for name in configs:
        if not name.startswith("A: "):
            continue
        row = name[3:]
        med = {}
        for label in ("A", "B"):
            runs = results[f"{label}: {row}"]
            wall = statistics.median(run.images / run.seconds for run, _ in runs)
            cpu = statistics.median(run.total_images / usage.cpu_s for run, usage in runs)
            med[label] = (wall, cpu)
        (aw, ac), (bw, bc) = med["A"], med["B"]
        print(f"{row[:62]:62s} {aw:8.0f} {bw:8.0f} {bw / aw:6.3f} {ac:9.0f} {bc:9.0f} "
              f"{bc / ac:6.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
