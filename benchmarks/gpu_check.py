"""The one-shot device check: GPU tests, then images/s at batch 256 against a ResNet-50 step.

Run on the GPU machine by benchmarks/gpu_check.sh (which installs the carried wheels and
builds the extension first); `--dry-run` rehearses every step on the CPU at toy sizes in
well under a minute, so the device run cannot die of a typo:

    python benchmarks/gpu_check.py --dry-run

Steps: (1) what runs: torch, CUDA, the native extension (required on the device: no silent
Pillow fallback), DALI; (2) pytest -m gpu: the race test and its negative controls, GPU/CPU
parity (uint8, float32, bf16), the ops chain under sync debug mode, pinned bytes against
ring_bytes; (3) throughput at batch 256 with RandomResizedCrop 224 + flip + normalize:
the ResNet-50 bf16 channels_last step on a batch already on the GPU (the ceiling),
FastLoader loader-only with 16 and 2 threads, FastLoader feeding the step, the plain
DataLoader (16 workers, pin_memory) feeding it, and DALI with and without ROI decode when
it is importable. Medians over timed batches after warm-up; results go to $OUT (or
--out) as gpu_check.json beside the printed table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from baseline import IMAGENET_MEAN, IMAGENET_STD, ImageFolder, train_transform  # noqa: E402
from gpu_check_model import training_step  # noqa: E402
from make_images import ensure_tree  # noqa: E402

GPU_TESTS = ["tests/test_gpu_race.py", "tests/test_gpu_cuda.py", "tests/test_gpu.py",
             "tests/test_masks_geometry.py", "tests/test_boxes_geometry.py",
             "tests/test_audio_loader.py", "tests/test_audio_mel.py"]


@dataclass(frozen=True)
class Sizes:
    """What one run measures: the device run's sizes, or the dry run's toy ones."""

    device: str
    count: int  # generated images
    batch: int
    crop: int
    width: int  # ResNet base width (64 = ResNet-50)
    warmup: int  # untimed batches
    timed: int  # timed batches per row
    threads: tuple[int, ...]
    workers: int
    test_timeout_s: int
    bf16: bool  # the step's autocast (the CPU dry run steps in float32)


DEVICE_SIZES = Sizes("cuda", 3072, 256, 224, 64, 3, 12, (16, 2), 16, 240, True)
DRY_SIZES = Sizes("cpu", 32, 8, 32, 4, 1, 2, (2, 1), 2, 60, False)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def report_environment(dry_run: bool) -> dict[str, Any]:
    """What runs; on the device a missing extension or GPU ends the check here, loudly."""
    import fastloader
    from fastloader.loader.dali.pipeline import dali_available

    facts = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
             "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
             "native": fastloader.native_available(), "dali": dali_available(),
             "cores": len(os.sched_getaffinity(0)), "python": sys.version.split()[0]}
    print("== environment:", json.dumps(facts))
    if not dry_run and not facts["cuda"]:
        raise SystemExit("FAILED: no CUDA device: this check needs the GPU machine")
    if not dry_run and not facts["native"]:
        raise SystemExit("FAILED: the native extension did not build or load; refusing to "
                         "measure the Pillow fallback as if it were the native path")
    return facts


def run_gpu_tests(sizes: Sizes) -> dict[str, Any]:
    """pytest -m gpu over the GPU test files; skips (no CUDA) are listed with their reason."""
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider",
               *GPU_TESTS]
    print("== gpu tests:", " ".join(command[1:]), flush=True)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=HERE.parent, timeout=sizes.test_timeout_s,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        print(f"FAILED: the GPU tests ran past {sizes.test_timeout_s} s")
        return {"rc": 124, "seconds": sizes.test_timeout_s}
    lines = (done.stdout + done.stderr).strip().splitlines()
    print("\n".join(lines[-40:]), flush=True)
    return {"rc": done.returncode, "seconds": round(time.perf_counter() - started, 1),
            "summary": lines[-1] if lines else ""}


def make_data(root: Path, sizes: Sizes) -> tuple[Path, Path]:
    from fastloader.pack.pipeline.tree import pack

    tree, packed = root / "images", root / "images.lmdb"
    started = time.perf_counter()
    ensure_tree(tree, sizes.count)
    if not (packed / "manifest.json").exists():
        pack(tree, packed, overwrite=True, quiet=True)
    print(f"== data: {sizes.count} images under {root} ({time.perf_counter() - started:.1f} s)",
          flush=True)
    return tree, packed


def endless(loader: Any) -> Iterator[Any]:
    """Batches across passes (a pass restart is part of what a training run pays)."""
    while True:
        yield from loader


def rate(batches: Iterator[Any], sizes: Sizes, step: Callable[..., None] | None) -> dict[str, Any]:
    """Images/s over `timed` batches after `warmup`, with `step` run on each when given.

    The median of per-batch times (synchronizing the device each batch, so a step's queued
    kernels are counted in it) and the overall rate over the timed span.
    """
    for _ in range(sizes.warmup):
        images, labels = next(batches)
        if step is not None:
            step(images, labels)
    sync(sizes.device)
    times, seen = [], 0
    span = time.perf_counter()
    for _ in range(sizes.timed):
        started = time.perf_counter()
        images, labels = next(batches)
        if step is not None:
            step(images, labels)
        sync(sizes.device)
        times.append(time.perf_counter() - started)
        seen += int(images.shape[0])
    total = time.perf_counter() - span
    median = statistics.median(times)
    return {"images_per_s_median": sizes.batch / median, "images_per_s_overall": seen / total,
            "ms_per_batch_median": 1000 * median, "batches": len(times)}


def fast_loader(packed: Path, sizes: Sizes, threads: int | str, **kwargs: Any) -> Any:
    from fastloader import FastLoader
    from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop

    return FastLoader(str(packed), batch_size=sizes.batch, shuffle=True,
                      transforms=[RandomResizedCrop(sizes.crop), RandomHorizontalFlip()],
                      normalize=(IMAGENET_MEAN, IMAGENET_STD), device=sizes.device,
                      num_threads=threads, prefetch=4, **kwargs)


def data_loader(tree: Path, sizes: Sizes) -> Iterator[Any]:
    loader = torch.utils.data.DataLoader(
        ImageFolder(tree, train_transform(sizes.crop)), batch_size=sizes.batch, shuffle=True,
        num_workers=sizes.workers, pin_memory=sizes.device == "cuda", persistent_workers=True,
        prefetch_factor=4, drop_last=True)
    for images, labels in endless(loader):  # the usual training-loop copy
        yield (images.to(sizes.device, non_blocking=True),
               labels.to(sizes.device, non_blocking=True))


def ceiling_batches(sizes: Sizes) -> Iterator[Any]:
    images = torch.randn(sizes.batch, 3, sizes.crop, sizes.crop, device=sizes.device)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (sizes.batch,), device=sizes.device)
    while True:
        yield images, labels


def measure(tree: Path, packed: Path, sizes: Sizes, dali: bool) -> dict[str, Any]:
    """Every throughput row; one failing row is reported and does not hide the others."""
    step = training_step(torch.device(sizes.device), width=sizes.width, bf16=sizes.bf16)
    rows: dict[str, Callable[[], dict[str, Any]]] = {
        "resnet50 step on a GPU-resident batch (ceiling)":
            lambda: rate(ceiling_batches(sizes), sizes, step)}
    for threads in sizes.threads:
        rows[f"FastLoader loader-only, {threads} threads"] = (
            lambda t=threads: with_loader(fast_loader(packed, sizes, t), sizes, None))
    rows["FastLoader -> resnet50 step"] = (
        lambda: with_loader(fast_loader(packed, sizes, sizes.threads[0],
                                        memory_format=torch.channels_last), sizes, step))
    rows["DataLoader (PIL, workers, pin_memory) -> resnet50 step"] = (
        lambda: rate(data_loader(tree, sizes), sizes, step))
    if dali:
        for roi in (True, False):
            rows[f"DALI loader-only, roi_decode={roi}"] = (
                lambda r=roi: with_loader(fast_loader(packed, sizes, sizes.threads[0],
                                                      backend="dali", roi_decode=r), sizes, None))
    results: dict[str, Any] = {}
    for name, row in rows.items():
        try:
            results[name] = row()
            print(f"{name:58s} {results[name]['images_per_s_median']:10,.0f} img/s (median "
                  f"batch), {results[name]['images_per_s_overall']:10,.0f} overall", flush=True)
        except Exception as exc:  # reported; the other rows still run
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{name:58s} FAILED: {results[name]['error']}", flush=True)
    ceiling = results[next(iter(rows))].get("images_per_s_median")
    for name, result in results.items():
        if ceiling and "step" in name and "images_per_s_median" in result:
            result["share_of_ceiling"] = result["images_per_s_median"] / ceiling
    return results


def with_loader(loader: Any, sizes: Sizes, step: Callable[..., None] | None) -> dict[str, Any]:
    with loader:
        result = rate(endless(loader), sizes, step)
        result["stats"] = {key: value for key, value in loader.stats().as_dict().items()
                           if isinstance(value, (int, float, str, bool))}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="rehearse every step on the CPU at toy sizes (< 1 minute)")
    parser.add_argument("--data", type=Path, default=None,
                        help="where to generate and pack images (default bench_data/gpu_check)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for gpu_check.json (default $OUT, else benchmarks/results)")
    parser.add_argument("--skip-tests", action="store_true", help="throughput rows only")
    args = parser.parse_args(argv)
    sizes = DRY_SIZES if args.dry_run else DEVICE_SIZES
    if args.dry_run:
        torch.set_num_threads(1)  # the step's threads would fight the loaders' on a small CPU
    started = time.perf_counter()
    facts = report_environment(args.dry_run)
    tests = {"skipped": True} if args.skip_tests else run_gpu_tests(sizes)
    data = args.data or HERE.parent / "bench_data" / ("gpu_check_dry" if args.dry_run
                                                      else "gpu_check")
    tree, packed = make_data(data, sizes)
    print(f"== throughput: batch {sizes.batch}, RandomResizedCrop {sizes.crop} + flip + "
          f"normalize, device {sizes.device}", flush=True)
    results = measure(tree, packed, sizes, facts["dali"])
    out = args.out or Path(os.environ.get("OUT") or HERE / "results")
    out.mkdir(parents=True, exist_ok=True)
    record = {"dry_run": args.dry_run, "sizes": sizes.__dict__, "environment": facts,
              "tests": tests, "throughput": results,
              "seconds": round(time.perf_counter() - started, 1)}
    name = "gpu_check_dry.json" if args.dry_run else "gpu_check.json"
    (out / name).write_text(json.dumps(record, indent=2, default=str))
    failed = [n for n, r in results.items() if "error" in r]
    print(f"== done in {record['seconds']} s; wrote {out / name}"
          + (f"; FAILED rows: {failed}" if failed else ""))
    return 1 if failed or tests.get("rc", 0) not in (0, 5) else 0


if __name__ == "__main__":
    raise SystemExit(main())
