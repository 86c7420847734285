"""Draw a bar chart (PNG) of median throughput with min-max whiskers from a benchmark's JSONL."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness import read_jsonl

COLOURS = {"DataLoader": "#8c8c8c", "FastLoader": "#1f77b4", "native": "#2ca02c"}
OTHER_COLOUR = "#ff7f0e"


def _colour(name: str) -> str:
    return next((c for prefix, c in COLOURS.items() if name.startswith(prefix)), OTHER_COLOUR)


def chart_data(records: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The environment record and the summary rows of a results file."""
    env = next((r for r in records if r.get("kind") == "env"), {})
    rows = [r for r in records if r.get("kind") == "summary"]
    if not rows:
        raise ValueError("no summary rows in the file; was the benchmark run to the end?")
    return env, rows


def plot(records: list[dict[str, Any]], out: Path, title: str | None = None) -> Path:
    """Horizontal bars: median rate per row, whiskers at min and max, labelled values."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on benchmark machines
    import matplotlib.pyplot as plt

    env, rows = chart_data(records)
    names = [r["name"] for r in rows]
    medians = [r["img_per_s"]["median"] for r in rows]
    low = [m - r["img_per_s"]["min"] for m, r in zip(medians, rows, strict=True)]
    high = [r["img_per_s"]["max"] - m for m, r in zip(medians, rows, strict=True)]
    unit = rows[0].get("unit", "images")
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.6))
    positions = list(range(len(rows)))[::-1]  # first row on top
    ax.barh(positions, medians, xerr=[low, high], color=[_colour(n) for n in names], capsize=3)
    ax.set_yticks(positions, names)
    for y, value, whisker in zip(positions, medians, high, strict=True):
        ax.text(value + whisker, y, f"  {value:.0f}", va="center")
    ax.set_xlabel(f"{unit}/s (median, whiskers min-max)")
    cores = env.get("cpu_affinity", "?")
    ax.set_title(title or f"{env.get('benchmark', 'benchmark')}: {env.get('cpu_model', '?')}, "
                 f"{cores} cores, git {env.get('git_revision', '?')}")
    ax.set_xlim(0, max(m + h for m, h in zip(medians, high, strict=True)) * 1.18)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", type=Path, help="a .jsonl file written by a bench_*.py")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: beside it)")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    if not args.results.is_file():
        parser.error(f"{args.results} does not exist; run a benchmark first")
    out = args.out or args.results.with_suffix(".png")
    try:
        plot(read_jsonl(args.results), out, args.title)
    except ValueError as exc:
        parser.error(f"{args.results}: {exc}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
