"""Write small JPEGs of every kind the prototype handles (and 4:2:2, which it must skip).

For the exactness check of `run.py` beyond the benchmark tree: 4:2:0, 4:4:4, grey,
progressive and restart-marker files at sizes from 1x1 up, cut from one benchmark image.

    python benchmarks/coeffs_proto/make_kinds.py SOURCE.jpg OUT_DIR
    python benchmarks/coeffs_proto/run.py --images OUT_DIR --rounds 1
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

SIZES: tuple[tuple[int, int], ...] = (
    (500, 375),
    (333, 500),
    (17, 9),
    (33, 31),
    (1, 1),
    (2, 2),
    (5, 3),
    (6, 8),
    (4, 4),
    (3, 7),
    (4, 300),
    (300, 4),
)


def main() -> None:
    """Cut each size from the source image's top-left and save it in every kind."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    pixels = np.asarray(Image.open(args.source).convert("RGB"))
    args.out.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        if width > pixels.shape[1] or height > pixels.shape[0]:
            continue
        crop = Image.fromarray(pixels[:height, :width].copy())
        name = f"{width}x{height}.jpg"
        crop.save(args.out / f"c420_{name}", "JPEG", quality=90)
        crop.save(args.out / f"c444_{name}", "JPEG", quality=90, subsampling=0)
        crop.save(args.out / f"c422_{name}", "JPEG", quality=90, subsampling=1)
        crop.convert("L").save(args.out / f"grey_{name}", "JPEG", quality=90)
        crop.save(args.out / f"prog420_{name}", "JPEG", quality=90, progressive=True)
        crop.save(args.out / f"rst420_{name}", "JPEG", quality=90, restart_marker_blocks=2)


if __name__ == "__main__":
    main()
