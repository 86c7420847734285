"""What a batch_transform= costs the packed loader: images/s with none, a no-op, and torch ops.

Each round runs every variant once over the same packed tree (interleaved, so load drift hits
all alike); the table gives the median images/s over rounds and the ratio to "none" measured in
the same rounds. "no-op, torch normalize (before)" runs the no-op with the normalize step the
loader used before BatchDecoder.normalize_planar (torch on the producer thread), patched in for
that variant only, so before and after are compared in the same rounds too.
Usage: python benchmarks/bench_batch_transform.py [--count 256 --rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from unittest.mock import patch

import numpy as np
import torch

from fastloader import FastLoader, RandomHorizontalFlip, RandomResizedCrop
from fastloader.gpu.planar import PlanarSpec
from fastloader.loader.images import batches as image_batches
from fastloader.loader.images.batch_transform import run_batch_transform
from fastloader.pack.pipeline.tree import pack
from make_images import ensure_tree

DATA = Path(__file__).resolve().parent.parent / "bench_data"
NORMALIZE = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def brightness_and_invert(images: torch.Tensor) -> torch.Tensor:
    """Two whole-batch torch ops on uint8 (kernels release the GIL)."""
    return (images.to(torch.int16) * 9 // 10).clamp_(0, 255).to(torch.uint8).flip(-1)


def per_sample_python(images: torch.Tensor) -> torch.Tensor:
    """A Python loop over the samples, as per-sample torchvision-style pipelines run."""
    for k in range(images.shape[0]):
        if k % 2:
            images[k] = images[k].flip(-1)
    return images


class TorchNormalized:
    """A no-op run the way the loader normalized before normalize_planar: torch on the producer
    thread (a uint8 -> float32 copy, then addcmul). Marks a variant for images_per_s."""

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return images


def torch_normalize(transform: object, staged: torch.Tensor, images: torch.Tensor,
                    spec: PlanarSpec, decoder: object) -> torch.Tensor:
    """The former loader/images/batch_transform.transform_planar, for the same-round comparison."""
    result = run_batch_transform(transform, staged)
    images.copy_(result)
    scale = torch.from_numpy(np.asarray(spec.scale, np.float32)).view(1, 3, 1, 1)
    shift = torch.from_numpy(np.asarray(spec.shift, np.float32)).view(1, 3, 1, 1)
    torch.addcmul(shift, images, scale, out=images)
    return images


VARIANTS: dict[str, Callable[[torch.Tensor], torch.Tensor] | None] = {
    "none": None,
    "no-op (lambda x: x)": lambda images: images,
    "no-op, torch normalize (before)": TorchNormalized(),
    "brightness + flip (2 batch ops)": brightness_and_invert,
    "per-sample Python loop": per_sample_python,
}


def images_per_s(path: Path, transform: object, batch: int, threads: int) -> float:
    if isinstance(transform, TorchNormalized):
        with patch.object(image_batches, "transform_planar", torch_normalize):
            return images_per_s(path, lambda images: images, batch, threads)
    with FastLoader(path, batch_size=batch, shuffle=True, device="cpu", num_threads=threads,
                    transforms=[RandomResizedCrop(224), RandomHorizontalFlip()],
                    normalize=NORMALIZE, batch_transform=transform) as loader:
        started = time.perf_counter()
        count = sum(len(labels) for _, labels in loader)
        return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    tree = DATA / "images"
    path = DATA / f"bt_{args.count}.lmdb"
    if ensure_tree(tree, args.count) or not path.exists():
        pack(tree, path, workers=2, quiet=True, overwrite=True)
    speeds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    ratios: dict[str, list[float]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for round_index in range(args.rounds):
        turn = round_index % len(names)  # rotate the order: no variant always runs first
        order = names[turn:] + names[:turn]
        this_round = {name: images_per_s(path, VARIANTS[name], args.batch, args.threads)
                      for name in order}
        for name, speed in this_round.items():
            speeds[name].append(speed)
            ratios[name].append(speed / this_round["none"])
    print(f"{args.count} images, batch {args.batch}, {args.threads} decode threads, "
          f"RandomResizedCrop(224), CPU, {args.rounds} interleaved rounds (order rotated)")
    print(f"{'batch_transform':34} {'img/s median (min-max)':>24} {'vs none (median)':>17}")
    for name in VARIANTS:
        s = speeds[name]
        print(f"{name:34} {statistics.median(s):10.0f} ({min(s):.0f}-{max(s):.0f})"
              f"{statistics.median(ratios[name]):17.3f}")


if __name__ == "__main__":
    main()
