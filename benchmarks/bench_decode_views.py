"""Multi-crop views from one decode (issue 46): DINO's 2 x 224 + 8 x 96 views per codec.

    python benchmarks/bench_decode_views.py [--images 256] [--batch 64] [--rounds 7] [--threads 1]

ImageNet-like JPEGs (benchmarks/make_images.py's generator, ~500x375 q90), as JPEG records,
restart-tiled records (tiles.repack) and coeffs records (coeffs.encode). Each sample takes
DINO's views: 2 global RandomResizedCrop boxes (scale 0.4-1) to 224 and 8 local ones (scale
0.05-0.4) to 96, flipped at random. Per codec and batch, three ways to make them:

- views: one BatchDecoder.decode_views_into call, each record decoded once for its 10 views;
- separate: 10 decode_into calls (2 at 224, 8 at 96), each record decoded once a view;
- one view: decode_into of the first global view alone (what a plain RandomResizedCrop costs);
- views + ops: views with DINO's pixel ops fused into the decode (ColorJitter(0.4, 0.4, 0.2,
  0.1, p=0.8), RandomGrayscale(0.2), GaussianBlur p=1.0 / 0.1 / 0.5 for global 1 / global 2 /
  local, RandomSolarize(128, p=0.2) on global 2), programs drawn before the rounds.

Rounds interleave the three (their order rotating); each measures thread CPU ms per sample
(the decoder's pool on `--threads` 1 runs in the calling thread, so its CPU is the decode's
whole cost, steady on a shared machine) and wall ms. Medians of the rounds and of the
same-round ratios (separate / views, views / one view, views + ops / views).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.decode import coeffs, tiles
from fastloader.decode.decode import BatchDecoder
from fastloader.decode.pixels import (
    ColorJitter,
    GaussianBlur,
    PixelProgram,
    PixelTransform,
    RandomGrayscale,
    RandomSolarize,
    draw_program,
)

sys.path.insert(0, str(Path(__file__).parent))
from harness import environment, format_table, round_order
from make_images import jpeg_bytes

GLOBAL, LOCAL = (224, 224), (96, 96)
SIZES = [GLOBAL] * 2 + [LOCAL] * 8
SCALES = [(0.4, 1.0)] * 2 + [(0.05, 0.4)] * 8  # DINO's global and local crop scales


def rrc_box(rng: np.random.Generator, height: int, width: int, scale: tuple[float, float]
            ) -> tuple[int, int, int, int]:
    """One RandomResizedCrop box (ratio 3/4-4/3) of the given area scale, as torchvision draws."""
    area = height * width
    for _ in range(10):
        target = area * rng.uniform(*scale)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        w, h = round(np.sqrt(target * ratio)), round(np.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    return 0, 0, height, width


Shapes = list[tuple[int, int]]


def make_records(count: int) -> tuple[dict[str, list[bytes]], dict[str, Any], Shapes]:
    """The images as each codec's records, the tiled ones' tables, and each image's (H, W)."""
    jpegs, shapes = [], []
    for seed in range(count):
        data, width, height = jpeg_bytes(seed)
        jpegs.append(data)
        shapes.append((height, width))
    tiled = [tiles.repack(data) for data in jpegs]
    assert all(t is not None for t in tiled)
    records = {"jpeg": jpegs, "tiles": [t.data for t in tiled if t is not None],
               "coeffs": [coeffs.encode(data) for data in jpegs]}
    tables = [t.table for t in tiled if t is not None]
    return records, {"tiles": tables}, shapes


def plan(shapes: list[tuple[int, int]], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """crops (n, 10, 4) and flips (n, 10): each image's DINO views."""
    rng = np.random.default_rng(seed)
    crops = np.array([[rrc_box(rng, h, w, s) for s in SCALES] for h, w in shapes], np.int32)
    return crops, rng.random((len(shapes), len(SIZES))) < 0.5


Batch = tuple[list[bytes], np.ndarray, np.ndarray, Any, list[PixelProgram | None]]


def dino_ops(view: int) -> list[PixelTransform]:
    """DINO's pixel ops of a view (0, 1: the global ones; 2-9: local)."""
    jitter = [ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), RandomGrayscale(p=0.2)]
    blur = GaussianBlur(sigma=(0.1, 2.0), p=(1.0, 0.1)[view] if view < 2 else 0.5)
    return [*jitter, blur, *([RandomSolarize(128, p=0.2)] if view == 1 else [])]


def programs(start: int, count: int) -> list[PixelProgram | None]:
    keys = np.arange(start, start + count, dtype=np.int64)
    return [draw_program(dino_ops(v), 0, 0, keys, v, *size) for v, size in enumerate(SIZES)]


def ways(decoder: BatchDecoder, batch_size: int) -> dict[str, Callable[[Batch], None]]:
    views_out = [np.empty((batch_size, *s, 3), np.uint8) for s in SIZES]
    single = {s: np.empty((batch_size, *s, 3), np.uint8) for s in (GLOBAL, LOCAL)}

    def views(b: Batch) -> None:
        records, crops, flips, tile_batch, _ = b
        assert decoder.decode_views_into(records, crops, flips, views_out, tile_batch) == \
            [None] * len(records)

    def views_ops(b: Batch) -> None:
        records, crops, flips, tile_batch, ops = b
        assert decoder.decode_views_into(records, crops, flips, views_out, tile_batch,
                                         programs=ops) == [None] * len(records)

    def separate(b: Batch) -> None:
        records, crops, flips, tile_batch, _ = b
        for v, size in enumerate(SIZES):
            decoder.decode_into(records, crops[:, v], flips[:, v], single[size], tile_batch)

    def one_view(b: Batch) -> None:
        records, crops, flips, tile_batch, _ = b
        decoder.decode_into(records, crops[:, 0], flips[:, 0], single[GLOBAL], tile_batch)

    return {"views": views, "separate": separate, "one view": one_view, "views + ops": views_ops}


def batches(records: list[bytes], tables: list[Any] | None, crops: np.ndarray,
            flips: np.ndarray, size: int) -> list[Batch]:
    out = []
    for at in range(0, len(records) - size + 1, size):
        tile_batch = None if tables is None else tiles.TileBatch.from_tables(tables[at:at + size])
        out.append((records[at:at + size], crops[at:at + size], flips[at:at + size], tile_batch,
                    programs(at, size)))
    return out


def measure(fn: Callable[[Batch], None], work: list[Batch]) -> tuple[float, float]:
    """(thread CPU ms, wall ms) per sample of fn over every batch."""
    cpu, wall = time.thread_time(), time.perf_counter()
    for b in work:
        fn(b)
    samples = sum(len(b[0]) for b in work)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return cpu * 1e3 / samples, wall * 1e3 / samples


def run_codec(work: list[Batch], rounds: int, threads: int, batch_size: int) -> dict[str, Any]:
    with BatchDecoder(threads, "native") as decoder:
        named = ways(decoder, batch_size)
        for fn in named.values():  # warm: buffers grown, pages touched
            fn(work[0])
        per_round: list[dict[str, tuple[float, float]]] = []
        for r in range(rounds):
            per_round.append({name: measure(named[name], work)
                              for name in round_order(list(named), r)})
    med = {name: {"cpu_ms": statistics.median(x[name][0] for x in per_round),
                  "wall_ms": statistics.median(x[name][1] for x in per_round)} for name in named}
    ratios = {
        "separate_over_views": statistics.median(x["separate"][0] / x["views"][0]
                                                 for x in per_round),
        "views_over_one_view": statistics.median(x["views"][0] / x["one view"][0]
                                                 for x in per_round),
        "ops_over_views": statistics.median(x["views + ops"][0] / x["views"][0]
                                            for x in per_round)}
    return {"medians": med, "ratios": ratios, "rounds": rounds}


def run(images: int, batch_size: int, rounds: int, threads: int) -> dict[str, Any]:
    records, tables, shapes = make_records(images)
    crops, flips = plan(shapes, seed=1)
    results = {}
    for codec, recs in records.items():
        work = batches(recs, tables.get(codec), crops, flips, batch_size)
        results[codec] = run_codec(work, rounds, threads, batch_size)
    return {"images": images, "batch": batch_size, "threads": threads, "codecs": results,
            "environment": environment()}


def table(result: dict[str, Any]) -> str:
    rows = []
    for codec, r in result["codecs"].items():
        m, q = r["medians"], r["ratios"]
        rows.append([codec, *(f"{m[w]['cpu_ms']:.2f}" for w in ("views", "separate", "one view",
                                                                 "views + ops")),
                     f"{q['separate_over_views']:.2f}x", f"{q['views_over_one_view']:.2f}x",
                     f"{q['ops_over_views']:.2f}x"])
    return format_table(["codec", "views ms", "10 decode_into ms", "1 view ms", "views + ops ms",
                         "separate / views", "views / 1 view", "ops / views"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    result = run(args.images, args.batch, args.rounds, args.threads)
    print(table(result))
    print("thread CPU ms per sample (medians of rounds); ratios: medians of same-round ratios")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
