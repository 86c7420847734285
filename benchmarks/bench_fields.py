"""What extra fields cost the loader: image + label vs image + label + caption + 512-float
embedding, the same JPEGs, the same transforms, interleaved rounds, same-round ratios."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from harness import (
    RESULTS_DIR,
    JsonlWriter,
    RunResult,
    env_line,
    environment,
    format_table,
    run_interleaved,
    run_row,
    spread_text,
    summary_row,
    timed_iteration,
)
from make_images import ensure_tree

DEFAULT_TREE = Path(__file__).resolve().parent.parent / "bench_data" / "images"
WIDE = ["image", "label", "caption", "emb"]


def pack_both(tree: Path, work: Path, workers: int | None) -> tuple[Path, Path]:
    """The tree's JPEGs packed twice with the Python API: image + label, and the same with a
    caption (60-100 characters) and a 512-float32 embedding per sample."""
    import fastloader

    images = sorted(p for p in tree.rglob("*") if p.is_file() and not p.name.startswith("."))
    classes = sorted({p.parent.name for p in images})
    rng = np.random.default_rng(0)
    narrow = [{"image": p, "label": classes.index(p.parent.name)} for p in images]
    wide = [dict(s, caption=f"a photo of {p.stem} " + "x" * int(rng.integers(40, 80)),
                 emb=rng.standard_normal(512).astype(np.float32))
            for s, p in zip(narrow, images, strict=True)]
    fields: dict[str, Any] = {"image": "image", "label": "int"}
    fastloader.pack(narrow, work / "narrow.lmdb", fields=fields, workers=workers)
    fields |= {"caption": "text", "emb": ("ndarray", "float32", (512,))}
    fastloader.pack(wide, work / "wide.lmdb", fields=fields, workers=workers)
    return work / "narrow.lmdb", work / "wide.lmdb"


def loader_run(dst: Path, fields: list[str] | None, images: int, batch: int) -> RunResult:
    from fastloader import FastLoader, RandomHorizontalFlip, RandomResizedCrop

    loader = FastLoader(dst, batch_size=batch, shuffle=True, device="cpu", num_threads=None,
                        transforms=[RandomResizedCrop(224), RandomHorizontalFlip()],
                        fields=fields)
    try:
        return timed_iteration(lambda: loader, lambda b: len(b[0]), images, warmup_batches=2)
    finally:
        loader.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=1000, help="size of the generated tree")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=None, help="packing workers")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "fields.jsonl")
    args = parser.parse_args(argv)
    ensure_tree(DEFAULT_TREE, args.images)
    env = environment()
    with tempfile.TemporaryDirectory(dir=DEFAULT_TREE.parent, prefix="bench_fields_") as tmp:
        narrow, wide = pack_both(DEFAULT_TREE, Path(tmp), args.workers)
        timed = args.images - 2 * args.batch  # one pass after the warm-up batches
        runs = {
            "image + label": lambda: loader_run(narrow, None, timed, args.batch),
            "image + label + caption + emb[512]": lambda: loader_run(wide, WIDE, timed,
                                                                      args.batch),
        }
        with JsonlWriter(args.out, "fields") as writer:
            results = run_interleaved(
                runs, args.repeats,
                on_run=lambda name, i, run, usage: writer.write(run_row(name, i, run, usage)))
            rows = [summary_row(name, r) for name, r in results.items()]
            base = [run.rate for run, _ in results["image + label"]]
            for row in rows:
                ratios = [run.rate / b for (run, _), b in zip(results[row["name"]], base,
                                                              strict=True)]
                row["vs_image_label"] = statistics.median(ratios)
                writer.write(row)
    body = [[r["name"], spread_text(r["img_per_s"]), f"{r['vs_image_label']:.3f}x"]
            for r in rows]
    print(format_table(["fields", "images/s median (min-max)",
                        "vs image + label (median of same-round ratios)"], body))
    print(f"{args.images} images, batch {args.batch}, RandomResizedCrop(224) + flip, CPU "
          f"target, {args.repeats} rounds")
    print(env_line(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
