"""Build and run the issue-30 record codec prototype over a folder of JPEGs; print markdown.

Standalone: not part of the package build or the test suite. Needs g++, make and libjpeg-dev.

    python benchmarks/coeffs_proto/run.py --images /work/ab/tree --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = ROOT / "build" / "coeffs_proto"
SOURCES = ("bench.cpp", "codec.cpp", "recon.cpp", "codec.h", "recon.h", "Makefile")

# (stage, label, variant, libjpeg variant it is compared with in the same round)
ROWS = (
    ("entropy", "libjpeg-turbo jpeg_read_coefficients", "entropy_libjpeg", None),
    ("entropy", "bytes (count + mask + int8)", "entropy_bytes", "entropy_libjpeg"),
    (
        "entropy",
        "nibbles (count + mask, bytes below zigzag 10, 4-bit + escapes)",
        "entropy_nibbles",
        "entropy_libjpeg",
    ),
    (
        "entropy",
        "nibbles-wide (bytes for blocks with >= 4 escapes)",
        "entropy_wide",
        "entropy_libjpeg",
    ),
    ("entropy", "rANS, 1 stream, band contexts", "entropy_rans1", "entropy_libjpeg"),
    ("entropy", "rANS, DC/AC-Y/AC-C streams", "entropy_streams", "entropy_libjpeg"),
    ("full", "libjpeg-turbo default decode", "full_libjpeg", None),
    ("full", "bytes + own reconstruction", "full_bytes", "full_libjpeg"),
    ("full", "nibbles + own reconstruction", "full_nibbles", "full_libjpeg"),
    ("full", "nibbles-wide + own reconstruction", "full_wide", "full_libjpeg"),
    ("full", "rANS streams + own reconstruction", "full_streams", "full_libjpeg"),
    ("crop", "libjpeg-turbo crop_scanline + skip_scanlines", "crop_libjpeg", None),
    ("crop", "bytes, 4-MCU segments", "crop_bytes", "crop_libjpeg"),
    ("crop", "nibbles, 4-MCU segments", "crop_nibbles", "crop_libjpeg"),
    ("crop", "nibbles, row segments", "crop_nibbles_rowseg", "crop_libjpeg"),
    ("crop", "nibbles-wide, 4-MCU segments", "crop_wide", "crop_libjpeg"),
    ("crop", "rANS streams, 4-MCU segments", "crop_streams", "crop_libjpeg"),
    ("crop", "rANS streams, row segments", "crop_streams_rowseg", "crop_libjpeg"),
)
SIZES = (
    ("JPEG (source file)", "jpeg"),
    ("bytes, 4-MCU segments", "bytes"),
    ("nibbles, 4-MCU segments", "nibbles"),
    ("nibbles, row segments", "nibbles_rowseg"),
    ("nibbles-wide, 4-MCU segments", "wide"),
    ("rANS 1 stream, 4-MCU segments", "rans1"),
    ("rANS streams, 4-MCU segments", "streams"),
    ("rANS streams, row segments", "streams_rowseg"),
)


def build(force: bool, jpeg_root: Path | None) -> Path:
    """Run make when the binary is missing or older than a source; returns the binary."""
    binary = BUILD / ("coeffs_bench_lj3" if jpeg_root else "coeffs_bench")
    stale = not binary.exists() or any(
        (HERE / name).stat().st_mtime > binary.stat().st_mtime for name in SOURCES
    )
    if force or stale:
        command = ["make", "-C", str(HERE), "-B" if force else "-s"]
        if jpeg_root:
            command.append(f"JPEG_ROOT={jpeg_root.resolve()}")
        subprocess.run(command, check=True)
    return binary


def run(binary: Path, images: Path, limit: int, rounds: int, seg: int) -> dict[str, Any]:
    """Run the benchmark binary over the first `limit` JPEGs under `images` (sorted)."""
    files = sorted(p for p in images.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if limit:
        files = files[:limit]
    if not files:
        sys.exit(f"run.py: no .jpg/.jpeg files under {images}; pass --images DIR")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        listing.write("\n".join(str(p) for p in files) + "\n")
    try:
        out = subprocess.run(
            [str(binary), str(rounds), str(seg), listing.name],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        Path(listing.name).unlink()
    result: dict[str, Any] = json.loads(out)
    return result


def table(result: dict[str, Any]) -> str:
    """Markdown tables: sizes, then per-core ms per image with same-round ratios."""
    n = result["images"]
    names = result["names"]
    cpu = [[t * 1000 / n for t in rd] for rd in result["cpu"]]
    wall = [[t * 1000 / n for t in rd] for rd in result["wall"]]
    col = {name: i for i, name in enumerate(names)}
    jpeg_bytes = result["bytes"]["jpeg"]
    lines = [
        f"{n} images, {result['rounds']} rounds, exactness: coefficient mismatches "
        f"{result['coef_mismatch']}, full-decode pixel mismatches {result['full_mismatch']}, "
        f"crop pixel mismatches {result['crop_mismatch']} (skipped {result['skipped']})",
        "",
        "| layout | KB/image | vs JPEG bytes |",
        "|---|---|---|",
    ]
    for label, key in SIZES:
        size = result["bytes"][key]
        lines.append(f"| {label} | {size / n / 1024:.1f} | {size / jpeg_bytes:.2f}x |")
    lines += [
        "",
        "| stage | variant | CPU ms/img (median) | wall ms/img (median) "
        "| speedup vs libjpeg, same round (median, min-max) |",
        "|---|---|---|---|---|",
    ]
    for stage, label, key, base in ROWS:
        i = col[key]
        c = statistics.median(rd[i] for rd in cpu)
        w = statistics.median(rd[i] for rd in wall)
        ratio = ""
        if base is not None:
            b = col[base]
            ratios = [rd[b] / rd[i] for rd in cpu]
            ratio = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        lines.append(f"| {stage} | {label} | {c:.3f} | {w:.3f} | {ratio} |")
    noise = [sum(w) / sum(c) for w, c in zip(result["wall"], result["cpu"], strict=True)]
    lj = [rd[col["full_libjpeg"]] for rd in cpu]
    lines += [
        "",
        f"Noise: wall/CPU time per round {min(noise):.2f}-{max(noise):.2f}; libjpeg full "
        f"decode CPU ms/img across rounds {min(lj):.3f}-{max(lj):.3f}.",
        f"Encode (once, not interleaved), ms/img: extract "
        f"{result['encode_s']['extract'] * 1000 / n:.3f}, bytes "
        f"{result['encode_s']['bytes'] * 1000 / n:.3f}, nibbles "
        f"{result['encode_s']['nibbles'] * 1000 / n:.3f}, rANS streams "
        f"{result['encode_s']['streams'] * 1000 / n:.3f}.",
    ]
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, build, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=Path("/work/ab/tree"))
    parser.add_argument("--limit", type=int, default=0, help="first N files (0 = all)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seg", type=int, default=4, help="segment width in MCUs")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument(
        "--jpeg-root",
        type=Path,
        help="libjpeg-turbo prefix with include/ and lib/libjpeg.a (tools/fetch_libjpeg.py); "
        "default: the system libjpeg",
    )
    parser.add_argument("--json", type=Path, help="also write the raw result here")
    args = parser.parse_args()
    binary = build(args.rebuild, args.jpeg_root)
    result = run(binary, args.images, args.limit, args.rounds, args.seg)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(table(result))


if __name__ == "__main__":
    main()
