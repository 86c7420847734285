"""Detection loading: FastLoader (image + boxes + box_labels, fused crop to 512 + flip, boxes
mapped through the plan) vs the plain torch DataLoader written the usual way (PIL decode,
crop/resize/flip, numpy box arithmetic; workers 0..2), on the same generated JPEGs and boxes.
Interleaved rounds; medians; each FastLoader row's ratio to the best DataLoader row is the
median of same-round ratios."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from baseline import pil_loader, rrc_params
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
from make_images import ensure_tree

DEFAULT_TREE = Path(__file__).resolve().parent.parent / "bench_data" / "images"
SIZE = 512
MIN_VISIBILITY = 0.25  # FastLoader's default min_box_visibility, applied by both
FIELDS = {"image": "image", "boxes": ("boxes", ["box_labels"]),
          "box_labels": ("ndarray", "int64", (-1,))}


def detection_samples(tree: Path) -> list[dict[str, Any]]:
    """Every JPEG of the tree with 1-8 random boxes (XYXY, source pixels) and labels 0..79."""
    rng = np.random.default_rng(0)
    samples = []
    for path in sorted(p for p in tree.rglob("*.jpg")):
        with Image.open(path) as image:
            width, height = image.size
        count = int(rng.integers(1, 9))
        x1, y1 = rng.uniform(0, width * 0.8, count), rng.uniform(0, height * 0.8, count)
        x2 = np.minimum(x1 + rng.uniform(16, width * 0.5, count), width)
        y2 = np.minimum(y1 + rng.uniform(16, height * 0.5, count), height)
        samples.append({"image": path, "boxes": np.stack([x1, y1, x2, y2], 1).astype(np.float32),
                        "box_labels": rng.integers(0, 80, count).astype(np.int64)})
    return samples


class DetectionDataset(torch.utils.data.Dataset):
    """The usual map-style detection dataset: PIL decode, RandomResizedCrop(512) + flip on the
    image, the same crop, scale and flip on the boxes with numpy, boxes mostly cut away
    dropped with their labels; uint8 CHW tensors (what FastLoader yields without normalize)."""

    def __init__(self, samples: list[dict[str, Any]]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        sample = self.samples[index]
        image = pil_loader(str(sample["image"]))
        top, left, h, w = rrc_params(image.height, image.width)
        image = image.crop((left, top, left + w, top + h)).resize(
            (SIZE, SIZE), Image.Resampling.BILINEAR)
        boxes = (sample["boxes"] - np.array([left, top, left, top])) * np.array(
            [SIZE / w, SIZE / h, SIZE / w, SIZE / h])
        if torch.rand(1).item() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            boxes = np.stack([SIZE - boxes[:, 2], boxes[:, 1], SIZE - boxes[:, 0],
                              boxes[:, 3]], axis=1)
        full = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        clipped = np.clip(boxes, 0, SIZE)
        visible = (clipped[:, 2] - clipped[:, 0]).clip(0) * (clipped[:, 3] - clipped[:, 1]).clip(0)
        keep = (visible > 0) & (visible >= MIN_VISIBILITY * full)
        pixels = torch.from_numpy(np.asarray(image, np.uint8).copy()).permute(2, 0, 1)
        return (pixels, torch.from_numpy(clipped[keep].astype(np.float32)),
                torch.from_numpy(sample["box_labels"][keep]))


def collate(batch: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> tuple[Any, ...]:
    images, boxes, labels = zip(*batch, strict=True)
    return torch.stack(images), list(boxes), list(labels)


def dataloader_run(samples: list[dict[str, Any]], workers: int, images: int,
                   batch: int) -> RunResult:
    loader = torch.utils.data.DataLoader(
        DetectionDataset(samples), batch_size=batch, shuffle=True, num_workers=workers,
        collate_fn=collate, persistent_workers=False)
    return timed_iteration(lambda: loader, lambda b: len(b[0]), images, warmup_batches=2)


def fastloader_run(dst: Path, transforms: list[Any], fields: list[str], images: int,
                   batch: int) -> RunResult:
    from fastloader import FastLoader

    loader = FastLoader(dst, batch_size=batch, shuffle=True, device="cpu", num_threads=None,
                        transforms=transforms, fields=fields)
    try:
        return timed_iteration(lambda: loader, lambda b: len(b[0]), images, warmup_batches=2)
    finally:
        loader.close()


def configurations(dst: Path, samples: list[dict[str, Any]], timed: int,
                   batch: int) -> dict[str, Any]:
    from fastloader import RandomHorizontalFlip, RandomIoUCrop, RandomResizedCrop, Resize

    rrc = [RandomResizedCrop(SIZE), RandomHorizontalFlip()]
    iou = [RandomIoUCrop(), Resize((SIZE, SIZE)), RandomHorizontalFlip()]
    boxes = ["image", "boxes", "box_labels"]
    runs: dict[str, Any] = {
        "FastLoader RRC512+flip, boxes": lambda: fastloader_run(dst, rrc, boxes, timed, batch),
        "FastLoader RRC512+flip, image only": lambda: fastloader_run(dst, rrc, ["image"],
                                                                     timed, batch),
        "FastLoader RandomIoUCrop+Resize512+flip, boxes": lambda: fastloader_run(
            dst, iou, boxes, timed, batch),
    }
    for workers in (0, 1, 2):
        runs[f"DataLoader workers={workers} RRC512+flip, boxes"] = (
            lambda w=workers: dataloader_run(samples, w, timed, batch))
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=400, help="size of the generated tree")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "detection.jsonl")
    args = parser.parse_args(argv)
    ensure_tree(DEFAULT_TREE, args.images)
    env = environment()
    samples = detection_samples(DEFAULT_TREE)
    with tempfile.TemporaryDirectory(dir=DEFAULT_TREE.parent, prefix="bench_det_") as tmp:
        import fastloader

        dst = Path(tmp) / "det.lmdb"
        fastloader.pack(samples, dst, fields=FIELDS)
        timed = len(samples) - 2 * args.batch  # one pass after the warm-up batches
        runs = configurations(dst, samples, timed, args.batch)
        with JsonlWriter(args.out, "detection") as writer:
            results = run_interleaved(
                runs, args.repeats,
                on_run=lambda name, i, run, usage: writer.write(run_row(name, i, run, usage)))
            rows = [summary_row(name, r) for name, r in results.items()]
            best = best_dataloader(rows)
            assert best is not None  # the configurations include DataLoader rows
            paired = paired_speedups(results, best["name"])
            for row in rows:
                row["vs_best_dataloader"] = paired[row["name"]]["median"]
                writer.write(row)
    body = [[r["name"], spread_text(r["img_per_s"]), f"{r['vs_best_dataloader']:.2f}x"]
            for r in rows]
    print(format_table(["loader", "images/s median (min-max)",
                        f"vs {best} (median of same-round ratios)"], body))
    print(f"{len(samples)} images, batch {args.batch}, output {SIZE}x{SIZE} uint8, CPU target, "
          f"{args.repeats} rounds")
    print(env_line(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
