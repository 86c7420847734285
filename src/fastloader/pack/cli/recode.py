"""`packdata recode SRC DST --codec coeffs|jpeg`: convert a packed dataset's records."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from fastloader.format.disk_space import human_bytes
from fastloader.pack.pipeline.recode import CODECS, kept_summary, recode


def run(argv: Sequence[str]) -> int:
    """Parse recode's arguments, convert, print a summary; the exit code."""
    parser = argparse.ArgumentParser(
        prog="packdata recode",
        description="Write a packed dataset's samples to a new dataset with its records in "
        "another codec: --codec coeffs turns JPEG records into coeffs records (lossless, the "
        "same pixels, faster to decode and crop), --codec jpeg turns coeffs records back into "
        "JPEGs of the same pixels (for DALI); other images keep their bytes. No source tree "
        "needed.")
    parser.add_argument("src", metavar="SRC",
                        help="a packed dataset folder (v1 or v2, tiled or not)")
    parser.add_argument("dst", metavar="DST", help="the dataset folder to create")
    parser.add_argument("--codec", choices=CODECS, required=True, help="the records' new codec")
    parser.add_argument("--workers", type=int, metavar="N", help="encoding threads "
                        "(default: all usable cores)")
    parser.add_argument("--overwrite", action="store_true", help="replace DST if it is a "
                        "packed dataset")
    parser.add_argument("--quiet", action="store_true", help="no summary")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    manifest = recode(args.src, args.dst, codec=args.codec, workers=args.workers,
                      overwrite=args.overwrite)
    if not args.quiet:
        seconds = time.perf_counter() - began
        print(f"{args.dst}: {manifest.num_samples} records in {len(manifest.shards)} shards, "
              f"{human_bytes(manifest.stats['record_bytes'])} of records, {seconds:.1f} s",
              file=sys.stderr)
        print(kept_summary(manifest), file=sys.stderr)
    return 0
