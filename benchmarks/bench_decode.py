"""Per-core JPEG decode speed: Pillow vs the native core, full image and fused RandomResizedCrop."""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from baseline import rrc_params
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
)
from make_images import ensure_tree

DEFAULT_TREE = Path(__file__).resolve().parent.parent / "bench_data" / "images"
SIZE = 224
CHUNK = 64  # records per BatchDecoder call, like a loader batch


def load_records(tree: Path, limit: int) -> list[bytes]:
    """The first `limit` JPEG files of the tree (sorted), read into memory."""
    paths = sorted(p for p in tree.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))[:limit]
    if not paths:
        raise SystemExit(f"no JPEG files under {tree}; pass --data with an image tree.")
    return [p.read_bytes() for p in paths]


def rrc_boxes(records: list[bytes], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """torchvision RandomResizedCrop boxes (top, left, h, w) and flips, one per record."""
    torch.manual_seed(seed)
    boxes = np.empty((len(records), 4), np.int32)
    for k, data in enumerate(records):
        width, height = Image.open(io.BytesIO(data)).size
        boxes[k] = rrc_params(height, width)
    flips = (torch.rand(len(records)) < 0.5).numpy()
    return boxes, flips


def _timed(fn: Callable[[], None], count: int) -> RunResult:
    t0 = time.perf_counter()
    fn()
    return RunResult(count, time.perf_counter() - t0, count)


def pillow_configs(records: list[bytes], boxes: np.ndarray, flips: np.ndarray) -> dict:
    """Pillow full decode, and Pillow decode + crop + resize + flip (the DataLoader's work)."""

    def full() -> None:
        for data in records:
            Image.open(io.BytesIO(data)).convert("RGB")

    def rrc() -> None:
        for data, (top, left, h, w), flip in zip(records, boxes, flips, strict=True):
            image = Image.open(io.BytesIO(data)).convert("RGB")
            image = image.crop((left, top, left + w, top + h))
            image = image.resize((SIZE, SIZE), Image.Resampling.BILINEAR)
            if flip:
                image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)

    n = len(records)
    return {
        "pillow full decode": lambda: _timed(full, n),
        "pillow decode + RRC-224 + flip": lambda: _timed(rrc, n),
    }


def native_configs(records: list[bytes], boxes: np.ndarray, flips: np.ndarray) -> dict:
    """Native full decode, crop-aware decode alone, full decode + resize, and the fused
    crop-aware RandomResizedCrop (decode + resize + flip); the differences split the stages."""
    from fastloader.decode.decode import BatchDecoder, decode

    decoder = BatchDecoder(1, backend="native")
    out = np.empty((CHUNK, SIZE, SIZE, 3), np.uint8)
    whole = np.zeros((CHUNK, 4), np.int32)  # [0, 0, 0, 0]: the whole image
    no_flip = np.zeros(CHUNK, np.bool_)

    def full() -> None:
        for data in records:
            decode(data)

    def crop_only() -> None:  # the decode stage of the fused path, without resize and flip
        for data, box in zip(records, boxes, strict=True):
            decode(data, crop=tuple(int(v) for v in box))

    def batched(crops: np.ndarray | None, mirror: np.ndarray | None) -> None:
        for start in range(0, len(records), CHUNK):
            chunk = records[start : start + CHUNK]
            n = len(chunk)
            c = whole[:n] if crops is None else crops[start : start + n]
            f = no_flip[:n] if mirror is None else mirror[start : start + n]
            errors = decoder.decode_into(chunk, c, f, out[:n])
            if any(errors):
                raise RuntimeError(f"decode failed: {next(e for e in errors if e)}")

    n = len(records)
    return {
        "native full decode": lambda: _timed(full, n),
        "native crop-aware decode only (RRC box, no resize)": lambda: _timed(crop_only, n),
        "native full decode + resize 224": lambda: _timed(lambda: batched(None, None), n),
        "native fused RRC-224 + flip": lambda: _timed(lambda: batched(boxes, flips), n),
    }


def tiled_configs(records: list[bytes], boxes: np.ndarray, flips: np.ndarray) -> dict:
    """The same images repacked as restart-tiled records (packdata --tiles, not timed): crop
    decode from a JPEG spliced from only the segments the box needs, alone and fused with
    resize + flip in BatchDecoder."""
    from fastloader.decode import tiles
    from fastloader.decode.decode import BatchDecoder, decode

    repacked = [tiles.repack(data) for data in records]
    tiled = [r.data if r is not None else data for r, data in zip(repacked, records, strict=True)]
    tables = [r.table if r is not None else None for r in repacked]
    decoder = BatchDecoder(1, backend="native")
    out = np.empty((CHUNK, SIZE, SIZE, 3), np.uint8)
    scratch = np.empty(max(len(d) for d in tiled), np.uint8)
    batches = [
        (tiled[s : s + CHUNK], tiles.TileBatch.from_tables(tables[s : s + CHUNK]), s)
        for s in range(0, len(tiled), CHUNK)
    ]

    def splice_crop_only() -> None:  # splice + crop-aware decode, no resize
        for data, table, box in zip(tiled, tables, boxes, strict=True):
            top, left, h, w = (int(v) for v in box)
            if table is None:
                decode(data, crop=(top, left, h, w))
                continue
            size, (y0, x0, _, _) = tiles.splice_into(data, table, (top, left, h, w), scratch)
            decode(scratch[:size], crop=(top - y0, left - x0, h, w))

    def fused(use_tiles: bool) -> None:
        for chunk, table_batch, start in batches:
            n = len(chunk)
            errors = decoder.decode_into(
                chunk, boxes[start : start + n], flips[start : start + n], out[:n],
                tiles=table_batch if use_tiles else None,
            )  # fmt: skip
            if any(errors):
                raise RuntimeError(f"decode failed: {next(e for e in errors if e)}")

    n = len(records)
    return {
        "tiled: native spliced crop decode only (RRC box, no resize)": lambda: _timed(
            splice_crop_only, n
        ),
        "tiled records, no splice: fused RRC-224 + flip": lambda: _timed(lambda: fused(False), n),
        "tiled: spliced fused RRC-224 + flip": lambda: _timed(lambda: fused(True), n),
    }


def print_table(rows: list[dict], env: dict) -> None:
    base = next((r for r in rows if r["name"] == "native full decode"), None)
    header = ["decode (1 thread)", "img/s median (min-max)", "ms/img", "vs native full"]
    body = []
    for row in rows:
        rate = row["img_per_s"]["median"]
        ratio = f"{rate / base['img_per_s']['median']:.2f}x" if base else "-"
        body.append([row["name"], spread_text(row["img_per_s"]), f"{1000 / rate:.2f}", ratio])
    print(format_table(header, body))
    print(env_line(env))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=None, help="image tree (default: generated)")
    parser.add_argument("--images", type=int, default=1000, help="images decoded per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "decode.jsonl")
    parser.add_argument("--quick", action="store_true", help="200 images, 2 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.repeats = min(args.images, 200), min(args.repeats, 2)
    tree = args.data
    if tree is None:
        tree = DEFAULT_TREE
        ensure_tree(tree, max(args.images, 1000), seed=args.seed)
    records = load_records(tree, args.images)
    boxes, flips = rrc_boxes(records, args.seed)

    import fastloader

    configs = pillow_configs(records, boxes, flips)
    skipped = {}
    if fastloader.native_available():
        configs.update(native_configs(records, boxes, flips))
        configs.update(tiled_configs(records, boxes, flips))
    else:
        skipped["native rows"] = "the native extension is not built or is disabled"
    env = environment()
    with JsonlWriter(args.out, "decode") as writer:
        results = run_interleaved(
            configs, args.repeats,
            on_run=lambda name, i, run, usage: writer.write(run_row(name, i, run, usage)),
        )
        rows = [summary_row(name, runs) for name, runs in results.items()]
        for row in rows:
            writer.write(row)
        for name, reason in skipped.items():
            writer.write({"kind": "skipped", "name": name, "reason": reason})
    print_table(rows, env)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
