"""Segmentation loading: image + mask, RandomResizedCrop(512) + flip, FastLoader vs the plain
torch DataLoader written the usual way (PIL decode of the JPEG and the mask PNG, crop + resize
of both, BILINEAR for the image and NEAREST for the mask, the same flip, to_tensor + normalize),
on the same generated photos and masks; interleaved rounds, same-round ratios."""

from __future__ import annotations

import argparse
import gc
import io
import multiprocessing
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw

from baseline import IMAGENET_MEAN, IMAGENET_STD, Normalize, rrc_params, to_tensor
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
from make_images import jpeg_bytes

SIZE = 512
SETTLE_S = 1.0  # after a DataLoader pass, before the next row starts
Factory = Callable[[], RunResult]


def mask_png(seed: int, width: int, height: int) -> bytes:
    """A label mask of 3-8 filled shapes (ellipses, rectangles, polygons), labels 1..20."""
    rng = np.random.default_rng([seed, 7])
    mask = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(mask)
    for _ in range(int(rng.integers(3, 9))):
        x, y = int(rng.integers(0, width - 40)), int(rng.integers(0, height - 40))
        w, h = (int(v) for v in rng.integers(40, max(41, min(width, height) // 2), size=2))
        label, kind = int(rng.integers(1, 21)), int(rng.integers(0, 3))
        if kind == 0:
            draw.ellipse([x, y, x + w, y + h], fill=label)
        elif kind == 1:
            draw.rectangle([x, y, x + w, y + h], fill=label)
        else:
            draw.polygon([(x, y + h), (x + w // 2, y), (x + w, y + h)], fill=label)
    buffer = io.BytesIO()
    mask.save(buffer, "PNG")
    return buffer.getvalue()


def make_files(root: Path, count: int) -> list[tuple[Path, Path]]:
    """count photo-like JPEGs (300-800 px) and their mask PNGs, as (image, mask) paths."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    pairs = []
    for i in range(count):
        data, width, height = jpeg_bytes(i)
        image, mask = root / "images" / f"{i:05d}.jpg", root / "masks" / f"{i:05d}.png"
        image.write_bytes(data)
        mask.write_bytes(mask_png(i, width, height))
        pairs.append((image, mask))
    return pairs


class SegmentationFiles(torch.utils.data.Dataset):
    """The usual segmentation Dataset: PIL opens image and mask, one random crop, resize
    (image bilinear, mask nearest) and flip for both; (normalized image, uint8 mask)."""

    def __init__(self, pairs: list[tuple[Path, Path]]) -> None:
        self.pairs = pairs
        self.normalize = Normalize(IMAGENET_MEAN, IMAGENET_STD)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image_path, mask_path = self.pairs[index]
        with open(image_path, "rb") as handle:
            image = Image.open(handle).convert("RGB")
        with open(mask_path, "rb") as handle:
            mask = Image.open(handle)
            mask.load()
        top, left, h, w = rrc_params(image.height, image.width)
        box = (left, top, left + w, top + h)
        image = image.resize((SIZE, SIZE), Image.Resampling.BILINEAR, box=box)
        mask = mask.resize((SIZE, SIZE), Image.Resampling.NEAREST, box=box)
        if torch.rand(1).item() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            mask = mask.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return self.normalize(to_tensor(image)), torch.from_numpy(np.array(mask, np.uint8))


def dataloader_config(pairs: list[tuple[Path, Path]], workers: int, batch: int, images: int
                      ) -> Factory:
    dataset = SegmentationFiles(pairs)

    def run() -> RunResult:
        def make() -> torch.utils.data.DataLoader:
            return torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True,
                                               num_workers=workers)

        result = timed_iteration(make, lambda b: len(b[0]), images, warmup_batches=2)
        # Let the workers' teardown finish here, untimed, and reap them, so the next row's
        # time does not carry it.
        gc.collect()
        time.sleep(SETTLE_S)
        multiprocessing.active_children()
        return result

    return run


def fastloader_config(dst: Path, fields: list[str], batch: int, images: int,
                      seeds: Iterator[int]) -> Factory:
    import fastloader

    def run() -> RunResult:
        loader = fastloader.FastLoader(
            dst, batch_size=batch, shuffle=True, seed=next(seeds), device="cpu",
            num_threads=None, fields=fields, normalize=(IMAGENET_MEAN, IMAGENET_STD),
            transforms=[fastloader.RandomResizedCrop(SIZE), fastloader.RandomHorizontalFlip()])
        try:
            return timed_iteration(lambda: loader, lambda b: len(b[0]), images,
                                   warmup_batches=2)
        finally:
            loader.close()

    return run


def codec_table(pairs: list[tuple[Path, Path]], repeats: int) -> str:
    """The stored mask forms side by side on these masks: bytes, decode time to a uint8 array
    (median of `repeats` passes over all masks, one thread)."""
    from fastloader.format.masks import decode_mask, encode_mask

    masks = [np.asarray(Image.open(m)) for _, m in pairs]

    def png_decode(blob: bytes) -> np.ndarray:
        with Image.open(io.BytesIO(blob)) as image:
            return np.asarray(image)

    def raw_decode(blob: bytes, shape: tuple[int, int]) -> np.ndarray:
        return np.frombuffer(zlib.decompress(blob), np.uint8).reshape(shape)

    forms = {
        "8-bit PNG (Pillow)": ([p.read_bytes() for _, p in pairs], lambda b, m: png_decode(b)),
        "raw + zlib": ([zlib.compress(m.tobytes(), 6) for m in masks],
                       lambda b, m: raw_decode(b, m.shape)),
        "runs + zlib (stored form)": ([encode_mask(m) for m in masks],
                                      lambda b, m: decode_mask(b)),
    }
    rows = []
    for name, (blobs, decode) in forms.items():
        assert all((decode(b, m) == m).all() for b, m in zip(blobs, masks, strict=True))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for blob, mask in zip(blobs, masks, strict=True):
                decode(blob, mask)
            times.append((time.perf_counter() - start) / len(blobs))
        rows.append([name, f"{statistics.mean(len(b) for b in blobs):.0f}",
                     f"{statistics.median(times) * 1e6:.0f}"])
    return format_table(["stored form", "bytes per mask (mean)", "decode us per mask (median)"],
                        rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=256, help="generated photos + masks")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2],
                        help="DataLoader num_workers values")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "segmentation.jsonl")
    parser.add_argument("--codec-only", action="store_true",
                        help="only the stored-form table (PNG vs raw vs runs)")
    args = parser.parse_args(argv)
    import fastloader

    env = environment()
    with tempfile.TemporaryDirectory(prefix="bench_segmentation_") as tmp:
        pairs = make_files(Path(tmp), args.images)
        print(codec_table(pairs, max(args.repeats, 5)))
        if args.codec_only:
            return 0
        dst = Path(tmp) / "seg.lmdb"
        fastloader.pack([{"image": str(i), "mask": str(m)} for i, m in pairs], dst,
                        fields={"image": "image", "mask": "mask"}, quiet=True)
        timed = args.images - 2 * args.batch  # one pass after the warm-up batches
        seeds = iter(range(1_000_000))
        runs: dict[str, Factory] = {
            "FastLoader image + mask": fastloader_config(dst, ["image", "mask"], args.batch,
                                                         timed, seeds),
            "FastLoader image only": fastloader_config(dst, ["image"], args.batch, timed,
                                                       seeds),
        }
        for w in args.workers:
            runs[f"DataLoader workers={w}"] = dataloader_config(pairs, w, args.batch, timed)
        with JsonlWriter(args.out, "segmentation") as writer:
            results = run_interleaved(
                runs, args.repeats,
                on_run=lambda name, i, run, usage: writer.write(run_row(name, i, run, usage)))
            rows = _summaries(results, args.workers, writer)
    body = [[r["name"], spread_text(r["img_per_s"]), f"{r['vs_best_dataloader']:.2f}x"]
            for r in rows]
    print(format_table(["loader", "images/s median (min-max)",
                        "vs best DataLoader (median of same-round ratios)"], body))
    print(f"{args.images} photos 300-800 px + masks, batch {args.batch}, RandomResizedCrop"
          f"({SIZE}) + flip, normalized float32 images + uint8 masks, CPU, {args.repeats} "
          "rounds")
    print(env_line(env))
    return 0


def _summaries(results: dict[str, list[Any]], workers: list[int], writer: JsonlWriter
               ) -> list[dict[str, Any]]:
    """Rows with the median of same-round ratios against the best DataLoader row."""
    rows = [summary_row(name, r) for name, r in results.items()]
    found = best_dataloader(rows)
    assert found is not None  # the configurations include DataLoader rows
    best = found["name"]
    paired = paired_speedups(results, best)
    for row in rows:
        row["vs_best_dataloader"] = paired[row["name"]]["median"]
        row["best_dataloader"] = best
        writer.write(row)
    return rows


if __name__ == "__main__":
    sys.exit(main())
