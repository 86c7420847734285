"""Training recipes, side by side: torch's DataLoader running them in PIL vs FastLoader's views.

Three recipes (benchmarks/pil_recipes.py says what each is, from torchvision's and DINO's
source): "dino" (2 global + 8 local crops with their colour ops; a sample is its 10 views),
"ta" (torchvision's ImageNet reference recipe: RandomResizedCrop 176, TrivialAugmentWide,
RandomErasing) and "plain" (RandomResizedCrop 224 + flip, the reference point). Each recipe's
rows run interleaved (harness.run_interleaved): DataLoader with 2 and 3 workers over the JPEG
tree, and FastLoader over the same images packed, on the CPU target, with the recipe written
in views and pixel ops (`fastloader.View`, `fastloader.decode.pixels`; issue #46). A DINO
recipe also times its first global view alone, and its ten views with crops and flips but no
pixel ops, so what the other nine views cost, and where, shows beside it.
Rates are samples per second (a DINO sample = its 10 views); ratios are against the best
DataLoader of the same recipe, as medians of same-round ratios. The machine's load average is
written before and after each recipe. MixUp and CutMix are batch-level device ops
(gpu_transforms=), left out of the timed recipe on both sides.

    python benchmarks/bench_recipes.py                 # 512 images, 5 rounds
    python benchmarks/bench_recipes.py --quick         # 256 images, 2 rounds
    python benchmarks/bench_recipes.py --recipes dino ta --workers 2 3 4
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from baseline import IMAGENET_MEAN, IMAGENET_STD, ImageFolder
from harness import (
    RESULTS_DIR,
    JsonlWriter,
    RunResult,
    best_dataloader,
    env_line,
    environment,
    format_table,
    paired_speedups,
    run_interleaved,
    run_row,
    spread_text,
    summary_row,
    timed_iteration,
)
from make_images import ensure_tree
from pil_recipes import RECIPES, Recipe

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TREE = REPO / "bench_data" / "images"
Factory = Callable[[], RunResult]
# The pixel ops the fastloader rows take from fastloader.decode.pixels (issue #46).
PIXEL_OPS = ("ColorJitter", "RandomGrayscale", "GaussianBlur", "RandomSolarize",
             "TrivialAugmentWide", "RandomErasing")


def samples_in(batch: Any) -> int:
    """Samples in a batch: the labels' length of (images or views, labels)."""
    return len(batch[1])


def dataloader_row(tree: Path, recipe: Recipe, workers: int, args: argparse.Namespace) -> Factory:
    """torch DataLoader over the JPEG files, the recipe's PIL transform in every worker."""
    dataset = ImageFolder(tree, recipe.make())

    def run() -> RunResult:
        def make() -> torch.utils.data.DataLoader:
            return torch.utils.data.DataLoader(
                dataset, batch_size=args.batch, shuffle=True, num_workers=workers,
                pin_memory=torch.cuda.is_available(), drop_last=True,
            )

        return timed_iteration(make, samples_in, args.images, args.warmup)

    return run


def fastloader_missing() -> str | None:
    """Why the fastloader rows cannot run here, or None when they can."""
    try:
        import fastloader
    except Exception as exc:  # a checkout being built may fail to import in any way
        return f"fastloader does not import ({type(exc).__name__}: {exc})"
    try:
        have = set(dir(importlib.import_module("fastloader.decode.pixels")))
    except ImportError:  # a fastloader from before the pixel ops
        have = set()
    missing = [] if hasattr(fastloader, "View") else ["View"]
    missing += [name for name in PIXEL_OPS if name not in have]
    if missing:
        return (f"this fastloader has no {', '.join(missing)}: the views and pixel ops of "
                "issue #46 (branches viewsloader and pixelops) have not landed in it")
    return None


# The DINO rows beside the recipe: what its first global view costs alone, and its ten views
# with their crops and flips but none of their pixel ops (the views' resize cost apart).
VARIANTS = {"first view alone": "first", "crops and flips only": "geometry"}


def fastloader_views(recipe: str, variant: str = "full") -> dict[str, Any]:
    """The recipe as FastLoader arguments: views=[...] for DINO, transforms=[...] otherwise
    (variant: "full", or for DINO "first" or "geometry", see VARIANTS)."""
    import fastloader as fl

    px = importlib.import_module("fastloader.decode.pixels")
    if recipe == "plain":
        return {"transforms": [fl.RandomResizedCrop(224), fl.RandomHorizontalFlip()]}
    if recipe == "ta":
        return {"transforms": [fl.RandomResizedCrop(176), fl.RandomHorizontalFlip(),
                               px.TrivialAugmentWide(), px.RandomErasing(p=0.1)]}
    ops = variant != "geometry"
    colour = [px.ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), px.RandomGrayscale(p=0.2)] if ops else []

    def view(size: int, scale: tuple[float, float], pixel_ops: list[Any], count: int = 1) -> Any:
        return fl.View([fl.RandomResizedCrop(size, scale=scale), fl.RandomHorizontalFlip(),
                        *colour, *(pixel_ops if ops else [])], count=count)

    blur = (0.1, 2.0)
    global1 = view(224, (0.32, 1.0), [px.GaussianBlur(sigma=blur, p=1.0)])
    if variant == "first":
        return {"views": [global1]}
    global2 = view(224, (0.32, 1.0), [px.GaussianBlur(sigma=blur, p=0.1),
                                      px.RandomSolarize(128, p=0.2)])
    local = view(96, (0.05, 0.32), [px.GaussianBlur(sigma=blur, p=0.5)], count=8)
    return {"views": [global1, global2, local]}


def fastloader_row(path: Path, recipe: str, args: argparse.Namespace, seeds: Iterator[int],
                   variant: str = "full") -> Factory:
    """FastLoader over the packed copy, the recipe fused into its decode (CPU target)."""
    import fastloader

    def run() -> RunResult:
        threads = {"num_threads": args.threads} if args.threads else {}
        loader = fastloader.FastLoader(
            str(path), batch_size=args.batch, shuffle=True, seed=next(seeds), drop_last=True,
            normalize=(IMAGENET_MEAN, IMAGENET_STD), device=args.device,
            **fastloader_views(recipe, variant), **threads,
        )
        try:
            return timed_iteration(lambda: loader, samples_in, args.images, args.warmup)
        finally:
            loader.close()

    return run


def recipe_rows(recipe: Recipe, tree: Path, packed: Path | None,
                args: argparse.Namespace) -> dict[str, Factory]:
    """One recipe's rows in their order within a round (--coeffs: the FastLoader row again over
    the tree packed with `--codec coeffs`, NAME.coeffs.lmdb beside it)."""
    rows = {f"DataLoader workers={w}": dataloader_row(tree, recipe, w, args) for w in args.workers}
    if packed is not None:
        seeds = itertools.count()
        rows["FastLoader"] = fastloader_row(packed, recipe.name, args, seeds)
        if args.coeffs:
            rows["FastLoader, coeffs records"] = fastloader_row(
                packed_copy(tree, "coeffs"), recipe.name, args, seeds)
        for label, variant in VARIANTS.items() if recipe.views > 1 else ():
            rows[f"FastLoader, {label}"] = fastloader_row(
                packed, recipe.name, args, seeds, variant)
    return rows


def _native() -> bool:
    """Whether fastloader's native extension is usable here (coeffs records need it)."""
    import fastloader

    return bool(fastloader.native_available())


def fastloader_source() -> dict[str, str]:
    """Which fastloader the rows ran (its package folder, that checkout's git revision): the
    benchmark may run from one checkout against another's fastloader."""
    try:
        import fastloader
    except Exception as exc:  # reported beside the skipped rows too
        return {"fastloader_source": f"not importable: {type(exc).__name__}"}
    folder = Path(fastloader.__file__).resolve().parent
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=folder,
                          capture_output=True, text=True, timeout=10, check=False)
    return {"fastloader_source": str(folder),
            "fastloader_git": done.stdout.strip() if done.returncode == 0 else "unknown"}


def load_average() -> list[float]:
    """`uptime`'s 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def measure_recipe(recipe: Recipe, rows: dict[str, Factory], args: argparse.Namespace,
                   writer: JsonlWriter) -> list[dict[str, Any]]:
    """Run one recipe's rows interleaved; write its runs and summaries; return the summaries."""
    load_before = load_average()
    results = run_interleaved(
        rows, args.repeats,
        on_run=lambda name, i, run, usage: writer.write(
            {**run_row(name, i, run, usage), "recipe": recipe.name}),
        on_pass=lambda stage, name: print(f"{recipe.name} {stage}: {name}", flush=True),
    )
    load_after = load_average()
    summaries = [summary_row(name, runs) for name, runs in results.items()]
    best = best_dataloader(summaries)
    paired = paired_speedups(results, best["name"]) if best else {}
    for row in summaries:
        row.update(recipe=recipe.name, views=recipe.views, load_before=load_before,
                   load_after=load_after)
        if best:
            row["speedup_vs_best_dataloader"] = (
                row["img_per_s"]["median"] / best["img_per_s"]["median"])
            row["paired_speedup"] = paired[row["name"]]
        writer.write(row)
    return summaries


def table(recipe: Recipe, rows: list[dict[str, Any]]) -> str:
    """One recipe's rows as a markdown table, against its best DataLoader row."""
    best = best_dataloader(rows)
    header = ["loader", "samples/s median (min-max)", "views/s", "vs best DataLoader",
              "same-round ratio median (min-max)", "CPU ms/sample", "peak RSS MB"]
    body = []
    for row in rows:
        rate = row["img_per_s"]["median"]
        views = recipe.views if "first view alone" not in row["name"] else 1
        paired = row.get("paired_speedup")
        body.append([
            row["name"], spread_text(row["img_per_s"]), f"{rate * views:.0f}",
            f"{rate / best['img_per_s']['median']:.2f}x" if best else "-",
            spread_text(paired, digits=2) if paired else "-",
            f"{1000 * row['cpu_s_per_img']['median']:.1f}", f"{row['peak_rss_mb']:.0f}",
        ])
    return format_table(header, body)


def packed_copy(tree: Path, codec: str = "jpeg") -> Path:
    """The tree packed beside it with `codec` (bench_loader's copy, reused when current)."""
    from bench_loader import ensure_packed

    suffix = ".lmdb" if codec == "jpeg" else f".{codec}.lmdb"
    path = tree.parent / (tree.name + suffix)
    ensure_packed(tree, path, codec=codec)
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="ImageFolder tree (default: generate bench_data/images); the "
                             "fastloader rows pack it beside itself as NAME.lmdb if missing")
    parser.add_argument("--count", type=int, default=512, help="images in the generated tree")
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--images", type=int, default=320, help="timed samples per run")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2, help="untimed batches at each run start")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3],
                        help="DataLoader num_workers values")
    parser.add_argument("--threads", type=int, default=None,
                        help="FastLoader num_threads (default: the loader's own)")
    parser.add_argument("--device", default="cpu",
                        help="FastLoader's target (default cpu: the issue's CPU-target goal)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "recipes.jsonl")
    parser.add_argument("--coeffs", action="store_true",
                        help="a further FastLoader row over the tree packed with --codec coeffs")
    parser.add_argument("--quick", action="store_true", help="256 images, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.images, args.repeats = min(args.count, 256), min(args.images, 128), 2
    if min(args.images, args.repeats, args.batch, args.count, *args.workers) < 1 \
            or args.warmup < 0:
        parser.error("--images, --repeats, --batch, --count and --workers must be >= 1, "
                     "--warmup >= 0")
    if args.count < args.images + args.warmup * args.batch:
        parser.error(f"--count {args.count} is too few for --images {args.images} after "
                     f"{args.warmup} warm-up batches of {args.batch}: a DataLoader pass would "
                     "end before the timed samples are counted")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tree = args.data
    if tree is None:
        tree = DEFAULT_TREE
        ensure_tree(tree, args.count)
    missing = fastloader_missing()
    packed = packed_copy(tree) if missing is None else None
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    tables = []
    with JsonlWriter(args.out, "recipes") as writer:
        writer.write({"kind": "config", "batch": args.batch, "images": args.images,
                      "warmup_batches": args.warmup, "repeats": args.repeats,
                      "tree": str(tree), "device": args.device, "recipes": args.recipes,
                      **fastloader_source()})
        if missing is not None:
            writer.write({"kind": "skipped", "name": "FastLoader", "reason": missing})
        elif args.coeffs and not _native():
            args.coeffs = False  # packing and decoding coeffs records take the extension
            writer.write({"kind": "skipped", "name": "FastLoader, coeffs records",
                          "reason": "coeffs records need fastloader's native extension"})
        for name in args.recipes:
            recipe = RECIPES[name]
            rows = measure_recipe(recipe, recipe_rows(recipe, tree, packed, args), args, writer)
            load = f"load {rows[0]['load_before'][0]} -> {rows[0]['load_after'][0]} (1 min)"
            tables.append(f"\n{recipe.title}, {recipe.views} view(s) a sample, {load}\n"
                          + table(recipe, rows))
    print("\n".join(tables))
    if missing is not None:
        print(f"\nskipped the FastLoader rows: {missing}")
    print(env_line(environment()))
    source = fastloader_source()
    print(f"fastloader from {source['fastloader_source']} "
          f"(git {source.get('fastloader_git', 'unknown')})")
    print(f"batch {args.batch}, {args.images} timed samples per run after {args.warmup} warm-up "
          f"batches, {args.repeats} interleaved rounds; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
