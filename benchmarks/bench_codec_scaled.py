"""DCT-scaled decodes of coeffs records against the JPEG path (issue 30): pixels and speed.

    python benchmarks/bench_codec_scaled.py --data TREE [--images 400] [--rounds 5]

Agreement: per image of TREE and per denominator d (2, 4, 8), one random crop and output size
for which the JPEG path takes libjpeg's 1/d scaled IDCT (checked through _core.dct_denominator),
flipped at random, decoded from the JPEG and from its record: scaled as records now decode
("after") and at full DCT size then resampled, as records decoded before (dct_scaling=False:
"before"). MAE and max |diff| (levels 0-255, all pixels and channels) per denominator.

Speed: thread CPU ms per image, one thread, of decodes the JPEG path scales: TREE's whole images
to thumbnails (1/2, 1/4, 1/8 for ~500x375 images), and --big images (TREE's first ones resized
bicubic to 3000x2000 and 1600x1200, q90 4:2:0) whole to a Resize(256)-like 256x384, 224x224 or
112x112 output, and RandomResizedCrop(224) boxes (scaled where a box is 3x the output or more).
Rounds interleave the JPEG path, records scaled and records at full size (the order alternating);
medians of the rounds and medians of the same-round ratios.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fastloader import _core
from fastloader.decode import coeffs

sys.path.insert(0, str(Path(__file__).parent))
from bench_codec import _cpu_ms, rrc_boxes
from harness import environment

Job = tuple[bytes, bytes, tuple[int, int, int, int], bool, tuple[int, int]]


def _decode(data: bytes, crop: tuple[int, int, int, int], flip: bool, size: tuple[int, int],
            scaled: bool = True) -> np.ndarray:
    out = np.empty((*size, 3), np.uint8)
    if coeffs.is_coeffs(data):
        error = _core.coeffs_decode_into(data, crop, flip, out, dct_scaling=scaled)
    else:
        error = _core.decode_into(data, crop, flip, out, dct_scaling=scaled)
    assert error is None, error
    return out


def scaled_job(rng: np.random.Generator, height: int, width: int,
               d: int) -> tuple[tuple[int, int, int, int], tuple[int, int]] | None:
    """A random crop (3d to 6d times its output per side, so 1/d and not 1/2d) and its size."""
    m = 3 * d
    if height < m or width < m:
        return None
    oh = int(rng.integers(1, height // m + 1))
    ow = int(rng.integers(1, width // m + 1))
    ch = int(rng.integers(oh * m, min(height, oh * 2 * m - 1) + 1))
    cw = int(rng.integers(ow * m, width + 1))
    crop = (int(rng.integers(0, height - ch + 1)), int(rng.integers(0, width - cw + 1)), ch, cw)
    assert _core.dct_denominator(crop, (oh, ow)) == d
    return crop, (oh, ow)


def agreement(jpegs: list[bytes], records: list[bytes]) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    diffs: dict[int, dict[str, list[tuple[float, int]]]] = {
        d: {"before": [], "after": []} for d in (2, 4, 8)}
    for jpeg, record in zip(jpegs, records, strict=True):
        hdr = _core.header(jpeg)
        for d in (2, 4, 8):
            job = scaled_job(rng, hdr.height, hdr.width, d)
            if job is None:
                continue
            crop, size = job
            flip = bool(rng.integers(0, 2))
            want = _decode(jpeg, crop, flip, size).astype(np.int32)
            for name, scaled in (("before", False), ("after", True)):
                diff = np.abs(_decode(record, crop, flip, size, scaled).astype(np.int32) - want)
                diffs[d][name].append((float(diff.mean()), int(diff.max())))
    rows: dict[str, Any] = {}
    for d, by in diffs.items():
        for name, values in by.items():
            maes = [mae for mae, _ in values]
            rows[f"1/{d} {name}"] = {
                "crops": len(values), "bit-exact": sum(top == 0 for _, top in values),
                "mean MAE": statistics.fmean(maes) if maes else None,
                "max MAE": max(maes, default=None),
                "max |diff|": max((top for _, top in values), default=None)}
    return rows


def big_images(jpegs: list[bytes], count: int) -> dict[str, list[bytes]]:
    from PIL import Image

    sets: dict[str, list[bytes]] = {"3000x2000": [], "1600x1200": []}
    for jpeg in jpegs[:count]:
        base = Image.open(io.BytesIO(jpeg)).convert("RGB")
        for name, (width, height) in (("3000x2000", (3000, 2000)), ("1600x1200", (1600, 1200))):
            buffer = io.BytesIO()
            base.resize((width, height), Image.Resampling.BICUBIC).save(
                buffer, "JPEG", quality=90, subsampling=2)
            sets[name].append(buffer.getvalue())
    return sets


def workloads(jpegs: list[bytes], big: dict[str, list[bytes]]) -> dict[str, list[Job]]:
    """name -> (jpeg, record, crop, flip, size) jobs, each a decode the JPEG path may scale."""
    rng = np.random.default_rng(1)
    encoded = {j: coeffs.encode(j) for j in jpegs + [b for v in big.values() for b in v]}
    whole = (0, 0, 0, 0)
    loads: dict[str, list[Job]] = {}
    for size in (56, 28, 14):
        loads[f"tree whole -> {size}x{size}"] = [(j, encoded[j], whole, False, (size, size))
                                                 for j in jpegs]
    for name, images in big.items():
        if not images:
            continue
        loads[f"{name} whole -> 256x384"] = [(j, encoded[j], whole, False, (256, 384))
                                             for j in images]
        for size in (224, 112):
            loads[f"{name} whole -> {size}x{size}"] = [(j, encoded[j], whole, False, (size, size))
                                                       for j in images]
        height, width = _core.header(images[0]).height, _core.header(images[0]).width
        loads[f"{name} RandomResizedCrop 224"] = [
            (j, encoded[j], rrc_boxes(rng, height, width), bool(rng.integers(0, 2)), (224, 224))
            for j in images for _ in range(5)]
    return loads


def denominators(jobs: list[Job]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for jpeg, _, crop, _, size in jobs:
        if crop == (0, 0, 0, 0):
            hdr = _core.header(jpeg)
            crop = (0, 0, hdr.height, hdr.width)
        d = _core.dct_denominator(crop, size)
        counts[d] = counts.get(d, 0) + 1
    return dict(sorted(counts.items()))


def speed(loads: dict[str, list[Job]], rounds: int) -> dict[str, Any]:
    paths: dict[str, Callable[[Job], Any]] = {
        "jpeg": lambda job: _decode(job[0], job[2], job[3], job[4]),
        "coeffs": lambda job: _decode(job[1], job[2], job[3], job[4]),
        "coeffs full-size": lambda job: _decode(job[1], job[2], job[3], job[4], scaled=False),
    }
    rows: dict[str, Any] = {}
    for name, jobs in loads.items():
        for fn in paths.values():  # warm-up: scratch buffers, caches
            _cpu_ms(fn, jobs[:3])
        times: dict[str, list[float]] = {path: [] for path in paths}
        for r in range(rounds):
            for path in (list(paths) if r % 2 == 0 else list(reversed(paths))):
                times[path].append(_cpu_ms(paths[path], jobs))
        row: dict[str, Any] = {"images": len(jobs), "denominators": denominators(jobs)}
        row.update({f"{path} ms": statistics.median(v) for path, v in times.items()})
        for path in ("coeffs", "coeffs full-size"):
            row[f"jpeg / {path}, same round"] = statistics.median(
                [a / b for a, b in zip(times["jpeg"], times[path], strict=True)])
        rows[name] = row
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="ImageFolder tree of JPEGs")
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--big", type=int, default=8, help="tree images made 3000x2000, 1600x1200")
    args = parser.parse_args()
    files = sorted(p for p in args.data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    jpegs = [p.read_bytes() for p in files[: args.images]]
    records = [coeffs.encode(j) for j in jpegs]
    result: dict[str, Any] = {"environment": environment(), "images": len(jpegs),
                              "libjpeg-turbo": _core.libjpeg_turbo_version,
                              "simd": _core.coeffs_simd()}
    result["agreement"] = agreement(jpegs, records)
    result["speed"] = speed(workloads(jpegs, big_images(jpegs, args.big)), args.rounds)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
