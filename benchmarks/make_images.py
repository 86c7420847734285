"""Generate a deterministic ImageNet-like ImageFolder tree of photo-like JPEGs for benchmarks."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import cast

import numpy as np
from PIL import Image, ImageDraw

# (width, height) of ImageNet train's most common shapes and how often this generator uses
# them; the remaining share gets random sides in 300-800 px, as the rest of ImageNet does.
COMMON_SIZES: tuple[tuple[tuple[int, int], float], ...] = (
    ((500, 375), 0.45),
    ((375, 500), 0.12),
    ((500, 333), 0.13),
    ((333, 500), 0.05),
)
QUALITY = 90
# Content knobs, tuned so a 500x375 image at quality 90 is ~110 KB like a real photo.
TEXTURE_AMPLITUDE = 135.0
TEXTURE_COVERAGE = 1.0
SENSOR_NOISE = 4.5


def image_size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) drawn from ImageNet-like proportions."""
    draw = rng.random()
    for size, share in COMMON_SIZES:
        if draw < share:
            return size
        draw -= share
    return int(rng.integers(300, 801)), int(rng.integers(300, 801))


def octave_noise(
    rng: np.random.Generator, height: int, width: int, cells: int, octaves: int, falloff: float
) -> np.ndarray:
    """Value noise summed over octaves (1/2**(o*falloff) amplitudes), roughly unit variance."""
    out = np.zeros((height, width), np.float32)
    total = 0.0
    longest = max(height, width)
    for octave in range(octaves):
        n = cells * 2**octave
        grid_h = max(2, n * height // longest + 2)
        grid_w = max(2, n * width // longest + 2)
        grid = rng.standard_normal((grid_h, grid_w)).astype(np.float32)
        # A bicubic upsample of a random grid is a cheap, smooth value-noise layer.
        upsampled = Image.fromarray(grid, "F").resize((width, height), Image.Resampling.BICUBIC)
        layer = np.asarray(upsampled)
        amplitude = 1.0 / 2 ** (octave * falloff)
        out += amplitude * layer
        total += amplitude
    return out / total


def _background(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    """Smooth luminance and chroma fields: sky, walls, out-of-focus regions."""
    lum = octave_noise(rng, height, width, 2, 8, 0.6)
    chroma_a = octave_noise(rng, height, width, 1, 4, 1.0)
    chroma_b = octave_noise(rng, height, width, 1, 4, 1.0)
    base = rng.uniform(60, 190, 3)
    rgb = np.stack(
        [
            base[0] + 70 * lum + 30 * chroma_a,
            base[1] + 70 * lum - 15 * chroma_a + 15 * chroma_b,
            base[2] + 70 * lum - 30 * chroma_b,
        ],
        axis=-1,
    )
    return Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8), "RGB")


def _draw_shapes(rng: np.random.Generator, image: Image.Image) -> None:
    """Large flat objects and small strokes: hard edges at many scales."""
    width, height = image.size
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 9))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        rw = int(rng.integers(width // 10, width // 2))
        rh = int(rng.integers(height // 10, height // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x0 + rw, y0 + rh], fill=colour)
        else:
            corners = int(rng.integers(3, 7))
            points = [
                (x0 + int(rng.integers(-rw, rw)), y0 + int(rng.integers(-rh, rh)))
                for _ in range(corners)
            ]
            draw.polygon(points, fill=colour)
    for _ in range(int(rng.integers(20, 60))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            x1 = x0 + int(rng.integers(-width // 4, width // 4))
            y1 = y0 + int(rng.integers(-height // 4, height // 4))
            draw.line([x0, y0, x1, y1], fill=colour, width=int(rng.integers(1, 4)))
        else:
            r = int(rng.integers(2, 15))
            draw.ellipse([x0, y0, x0 + r, y0 + int(r * rng.uniform(0.5, 2))], fill=colour)


def photo_like(seed: int, width: int, height: int) -> np.ndarray:
    """An RGB uint8 (height, width, 3) image with smooth regions, edges, texture and noise."""
    rng = np.random.default_rng(seed)
    image = _background(rng, height, width)
    _draw_shapes(rng, image)
    pixels = np.asarray(image).astype(np.float32)
    # Fine texture (foliage, fur, fabric), strong in some regions and absent in others.
    mask = np.clip(octave_noise(rng, height, width, 2, 3, 1.0) * 2.5 + TEXTURE_COVERAGE, 0, 1)
    texture = octave_noise(rng, height, width, 160, 3, 0.5)
    tint = rng.uniform(0.7, 1.3, 3).astype(np.float32)
    pixels += (TEXTURE_AMPLITUDE * mask * texture)[..., None] * tint
    pixels += rng.normal(0, SENSOR_NOISE, pixels.shape).astype(np.float32)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def jpeg_bytes(seed: int) -> tuple[bytes, int, int]:
    """The encoded JPEG for one image index seed, with its width and height."""
    width, height = image_size(np.random.default_rng([seed, 1]))
    buffer = io.BytesIO()
    Image.fromarray(photo_like(seed, width, height), "RGB").save(
        buffer, format="JPEG", quality=QUALITY
    )
    return buffer.getvalue(), width, height


def _write_one(job: tuple[str, int]) -> tuple[int, int, int]:
    path, seed = job
    data, width, height = jpeg_bytes(seed)
    Path(path).write_bytes(data)
    return len(data), width, height


def image_jobs(out: Path, count: int, classes: int, seed: int) -> list[tuple[str, int]]:
    """(path, per-image seed) for every image; image i goes to class i % classes."""
    jobs = []
    for i in range(count):
        folder = out / f"class_{i % classes:03d}"
        jobs.append((str(folder / f"img_{i:06d}.jpg"), seed * 10_000_000 + i))
    return jobs


def generate(
    out: Path, count: int, classes: int = 10, seed: int = 0, workers: int | None = None
) -> list[tuple[int, int, int]]:
    """Write the tree; return (bytes, width, height) per image. Same arguments, same bytes."""
    if count < 1 or classes < 1:
        raise ValueError(f"count={count}, classes={classes}: both must be >= 1.")
    jobs = image_jobs(out, count, classes, seed)
    for k in range(min(classes, count)):
        (out / f"class_{k:03d}").mkdir(parents=True, exist_ok=True)
    workers = workers or len(os.sched_getaffinity(0))
    if workers == 1 or count < 8:
        return [_write_one(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_write_one, jobs, chunksize=8))


STAMP_SUFFIX = ".make_images.json"


def stamp_path(out: Path) -> Path:
    """The parameters a tree was made with, in a file beside it (not inside: packdata would
    report a file in the tree as ignored)."""
    return out.with_name(out.name + STAMP_SUFFIX)


def ensure_tree(out: Path, count: int, classes: int = 10, seed: int = 0) -> bool:
    """Generate the tree unless `out` already holds one made with the same parameters.

    Returns True when it generated. The parameters live in a stamp file beside the tree.
    """
    wanted = {"count": count, "classes": classes, "seed": seed, "quality": QUALITY}
    stamp = stamp_path(out)
    try:
        if json.loads(stamp.read_text()) == wanted:
            return False
    except (OSError, ValueError):
        pass
    if out.exists():
        if not stamp.exists() and any(out.iterdir()):  # never delete a tree we did not make
            raise FileExistsError(
                f"{out} exists and was not made by make_images.py; pass an empty or new folder."
            )
        shutil.rmtree(out)
    stamp.unlink(missing_ok=True)  # a tree half-made by an interrupted run is not reused
    records = generate(out, count, classes, seed)
    print(format_stats(size_stats(records)))
    stamp.write_text(json.dumps(wanted))
    return True


def size_stats(records: list[tuple[int, int, int]]) -> dict[str, object]:
    """Count, mean/median file size in KB and a histogram of (width x height)."""
    sizes_kb = [size / 1000 for size, _, _ in records]
    dims = Counter(f"{w}x{h}" for _, w, h in records)
    common = {name: n for name, n in dims.most_common() if n > 1 or len(dims) < 8}
    other = len(records) - sum(common.values())
    return {
        "count": len(records),
        "mean_kb": statistics.mean(sizes_kb),
        "median_kb": statistics.median(sizes_kb),
        "min_kb": min(sizes_kb),
        "max_kb": max(sizes_kb),
        "total_mb": sum(size for size, _, _ in records) / 1e6,
        "dimensions": {**common, **({"other (300-800 px sides)": other} if other else {})},
    }


def format_stats(stats: dict[str, object]) -> str:
    """Human-readable size statistics."""
    lines = [
        f"images: {stats['count']}, total {stats['total_mb']:.1f} MB",
        f"file size KB: mean {stats['mean_kb']:.1f}, median {stats['median_kb']:.1f}, "
        f"min {stats['min_kb']:.1f}, max {stats['max_kb']:.1f}",
        "dimensions (WxH):",
    ]
    dims = cast(dict[str, int], stats["dimensions"])
    lines += [f"  {name:>26}: {n}" for name, n in dims.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="folder to create the tree in")
    parser.add_argument("--count", type=int, default=1000, help="number of images")
    parser.add_argument("--classes", type=int, default=10, help="number of class folders")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same bytes")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.classes < 1 or args.seed < 0:
        parser.error("--count and --classes must be >= 1 and --seed >= 0")
    t0 = time.perf_counter()
    records = generate(args.out, args.count, args.classes, args.seed, args.workers)
    elapsed = time.perf_counter() - t0
    print(format_stats(size_stats(records)))
    print(f"wrote {args.out} in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
