"""Coeffs records against JPEG (issue 30): per-core decode ms, stored size, packing, loader img/s.

    python benchmarks/bench_codec.py --data TREE [--images 400] [--rounds 5]

Per-core rows time one thread (thread CPU time, so other jobs on a shared machine cost little)
decoding every image: whole, and RandomResizedCrop(224)-distributed crops resized to 224 x 224
and flipped, through the JPEG path (libjpeg-turbo, DCT scaling on as the loader uses it) and
through the coeffs path. Rounds interleave the two; medians per image and the same-round ratio.
The packing rows time `pack(TREE, codec=...)` for jpeg and coeffs (best of 2, interleaved)
and one recode. The loader rows time FastLoader (RandomResizedCrop + flip + normalize, batch
64, --threads decode threads) over the JPEG dataset and its recode, interleaved: wall-clock
img/s, and the process's CPU ms per image (all threads), which other jobs on a shared machine
disturb far less than the wall clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fastloader import FastLoader, _core
from fastloader.decode import coeffs
from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop
from fastloader.pack.api import pack
from fastloader.pack.pipeline.recode import recode

sys.path.insert(0, str(Path(__file__).parent))
from harness import environment

SIZE = 224
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def rrc_boxes(rng: np.random.Generator, height: int, width: int) -> tuple[int, int, int, int]:
    """One torchvision RandomResizedCrop box: scale (0.08, 1), ratio (3/4, 4/3)."""
    area = height * width
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        w, h = round(np.sqrt(target * ratio)), round(np.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    return 0, 0, height, width


def _cpu_ms(fn: Any, items: list[Any]) -> float:
    """Thread CPU ms per item of fn over items."""
    began = time.thread_time()
    for item in items:
        fn(item)
    return (time.thread_time() - began) * 1e3 / len(items)


def per_core(jpegs: list[bytes], records: list[bytes], rounds: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    full: list[np.ndarray] = []
    crops = []
    for data in jpegs:
        hdr = _core.header(data)
        full.append(np.empty((hdr.height, hdr.width, 3), np.uint8))
        crops.append((rrc_boxes(rng, hdr.height, hdr.width), bool(rng.integers(0, 2))))
    slot = np.empty((SIZE, SIZE, 3), np.uint8)

    def jpeg_full(k: int) -> None:
        _core.decode_into(jpegs[k], (0, 0, 0, 0), False, full[k])

    def coeffs_full(k: int) -> None:
        _core.coeffs_decode_into(records[k], (0, 0, 0, 0), False, full[k])

    def jpeg_crop(k: int) -> None:
        _core.decode_into(jpegs[k], crops[k][0], crops[k][1], slot)

    def coeffs_crop(k: int) -> None:
        _core.coeffs_decode_into(records[k], crops[k][0], crops[k][1], slot)

    def scalar(fn: Any) -> Any:  # the run-time fallback for CPUs without AVX2
        def run(k: int) -> None:
            old = _core.coeffs_set_simd(False)
            try:
                fn(k)
            finally:
                _core.coeffs_set_simd(old)
        return run

    rows = {"jpeg full": jpeg_full, "coeffs full": coeffs_full, "jpeg crop": jpeg_crop,
            "coeffs crop": coeffs_crop, "coeffs full scalar": scalar(coeffs_full),
            "coeffs crop scalar": scalar(coeffs_crop)}
    index = list(range(len(jpegs)))
    times: dict[str, list[float]] = {name: [] for name in rows}
    for fn in rows.values():  # warm-up: page cache, scratch buffers
        _cpu_ms(fn, index[:20])
    for r in range(rounds):
        for name in (list(rows) if r % 2 == 0 else list(reversed(rows))):
            times[name].append(_cpu_ms(rows[name], index))
    out: dict[str, Any] = {name: statistics.median(v) for name, v in times.items()}
    for kind in ("full", "crop"):
        ratios = [a / b for a, b in zip(times[f"jpeg {kind}"], times[f"coeffs {kind}"],
                                        strict=True)]
        out[f"speedup {kind}"] = statistics.median(ratios)
    return out


def encode_cost(jpegs: list[bytes]) -> dict[str, float]:
    """Thread CPU ms per image: coeffs.encode, and the whole-file check decode pack runs."""
    def check(data: bytes) -> None:
        hdr = _core.header(data)
        out = np.empty((max(1, hdr.height // 24), max(1, hdr.width // 24), 3), np.uint8)
        _core.decode_into(data, (0, 0, 0, 0), False, out)

    return {"encode ms": _cpu_ms(coeffs.encode, jpegs), "check decode ms": _cpu_ms(check, jpegs)}


def pack_rows(tree: Path, folder: Path, rounds: int) -> dict[str, list[float]]:
    """Seconds of `pack(tree, codec=...)` for jpeg and coeffs (one pass each: coeffs records
    are encoded in the pack's workers), interleaved, the order alternating each round."""
    seconds: dict[str, list[float]] = {"pack jpeg s": [], "pack coeffs s": []}
    for r in range(rounds):
        for name in (("jpeg", "coeffs") if r % 2 == 0 else ("coeffs", "jpeg")):
            began = time.perf_counter()
            pack(tree, folder / f"{name}-pack.lmdb", quiet=True, overwrite=True, codec=name)
            seconds[f"pack {name} s"].append(time.perf_counter() - began)
    ratios = [j / c for j, c in zip(seconds["pack jpeg s"], seconds["pack coeffs s"],
                                    strict=True)]
    seconds["coeffs/jpeg files/s, same round"] = ratios
    return seconds


def loader_rows(tree: Path, folder: Path, rounds: int, threads: int) -> dict[str, Any]:
    jpeg, coeff = folder / "jpeg.lmdb", folder / "coeffs.lmdb"
    seconds: dict[str, list[float]] = {**pack_rows(tree, folder, 2), "recode s": []}
    pack(tree, jpeg, quiet=True)
    began = time.perf_counter()
    recode(jpeg, coeff)
    seconds["recode s"].append(time.perf_counter() - began)
    transforms = [RandomResizedCrop(SIZE), RandomHorizontalFlip()]
    rates: dict[str, list[float]] = {"jpeg": [], "coeffs": []}
    cpu: dict[str, list[float]] = {"jpeg": [], "coeffs": []}

    def one(path: Path) -> tuple[float, float]:
        with FastLoader(path, batch_size=64, shuffle=True, transforms=transforms,
                        normalize=(MEAN, STD), num_threads=threads, seed=1) as loader:
            it = iter(loader)
            next(it)  # warm-up batch
            began, cpu0, n = time.perf_counter(), time.process_time(), 0
            for images, _ in it:
                n += len(images)
            return n / (time.perf_counter() - began), (time.process_time() - cpu0) * 1e3 / n

    one(jpeg)
    one(coeff)
    for r in range(rounds):
        for name in (("jpeg", "coeffs") if r % 2 == 0 else ("coeffs", "jpeg")):
            rate, ms = one(jpeg if name == "jpeg" else coeff)
            rates[name].append(rate)
            cpu[name].append(ms)
    ratios = [b / a for a, b in zip(rates["jpeg"], rates["coeffs"], strict=True)]
    return {"jpeg img/s": statistics.median(rates["jpeg"]),
            "coeffs img/s": statistics.median(rates["coeffs"]),
            "speedup": statistics.median(ratios), "rates": rates,
            "jpeg cpu ms/img": statistics.median(cpu["jpeg"]),
            "coeffs cpu ms/img": statistics.median(cpu["coeffs"]),
            "cpu speedup": statistics.median(
                [a / b for a, b in zip(cpu["jpeg"], cpu["coeffs"], strict=True)]),
            **{name: min(v) for name, v in seconds.items()}}


KINDS = (((375, 500), 1), ((1200, 1600), 2), ((2000, 3000), 2), ((2000, 3000), 1))


def kinds_rows(source: Path) -> list[dict[str, Any]]:
    """Other sizes and subsamplings: source resized (bicubic) and saved at q90, one thread,
    best of 3 passes over 40 RandomResizedCrop boxes and of 2 full decodes."""
    import io

    from PIL import Image

    base = Image.open(source).convert("RGB")
    rows = []
    for (height, width), sub in KINDS:
        buffer = io.BytesIO()
        base.resize((width, height), Image.Resampling.BICUBIC).save(
            buffer, "JPEG", quality=90, subsampling=sub)
        jpeg = buffer.getvalue()
        record = coeffs.encode(jpeg)
        rng = np.random.default_rng(0)
        boxes = [(rrc_boxes(rng, height, width), bool(rng.integers(0, 2))) for _ in range(40)]
        slot, full = np.empty((SIZE, SIZE, 3), np.uint8), np.empty((height, width, 3), np.uint8)
        row: dict[str, Any] = {"image": f"{width}x{height} {('4:4:4', '4:2:2', '4:2:0')[sub]}",
                               "size ratio": len(record) / len(jpeg)}
        for name, data, fn in (("jpeg", jpeg, _core.decode_into),
                               ("coeffs", record, _core.coeffs_decode_into)):
            def crop(box: Any, d: bytes = data, f: Any = fn, out: np.ndarray = slot) -> None:
                f(d, box[0], box[1], out)

            def whole(_: int, d: bytes = data, f: Any = fn, out: np.ndarray = full) -> None:
                f(d, (0, 0, 0, 0), False, out)

            row[f"{name} crop"] = min(_cpu_ms(crop, boxes) for _ in range(3))
            row[f"{name} full"] = min(_cpu_ms(whole, [0, 1]) for _ in range(3))
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="ImageFolder tree of JPEGs")
    parser.add_argument("--images", type=int, default=400, help="images timed per core")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="loader decode threads")
    parser.add_argument("--no-loader", dest="loader", action="store_false")
    parser.add_argument("--pack-only", type=int, default=0, metavar="ROUNDS",
                        help="only the packing rows, over ROUNDS interleaved rounds")
    parser.add_argument("--kinds", action="store_true", help="also time other sizes and "
                        "subsamplings, made from the first image")
    args = parser.parse_args()
    if args.pack_only:
        with tempfile.TemporaryDirectory(prefix="bench-codec-") as tmp:
            rows = pack_rows(args.data, Path(tmp), args.pack_only)
        print(json.dumps({"environment": environment(), "packing": rows}, indent=1))
        return 0
    files = sorted(p for p in args.data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    jpegs = [p.read_bytes() for p in files[: args.images]]
    records = [coeffs.encode(j) for j in jpegs]
    result: dict[str, Any] = {"environment": environment(), "images": len(jpegs),
                              "simd": _core.coeffs_simd()}
    result["size ratio"] = sum(map(len, records)) / sum(map(len, jpegs))
    result["jpeg bytes/img"] = sum(map(len, jpegs)) / len(jpegs)
    result["per core ms"] = per_core(jpegs, records, args.rounds)
    result["packing"] = encode_cost(jpegs)
    if args.kinds:
        result["kinds"] = kinds_rows(files[0])
    if args.loader:
        with tempfile.TemporaryDirectory(prefix="bench-codec-") as tmp:
            result["loader"] = loader_rows(args.data, Path(tmp), args.rounds, args.threads)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
