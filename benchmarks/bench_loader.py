"""Loader throughput, side by side: plain DataLoader over files vs FastLoader over packed shards."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from baseline import IMAGENET_MEAN, IMAGENET_STD, ImageFolder, train_transform
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

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TREE = REPO / "bench_data" / "images"
SIZE = 224
Factory = Callable[[], RunResult]


def cores() -> int:
    return len(os.sched_getaffinity(0))


def _tree_files(tree: Path) -> int:
    return sum(1 for p in tree.rglob("*") if p.is_file() and not p.name.startswith("."))


def ensure_packed(tree: Path, dst: Path, quiet: bool = True, tiles: bool = False,
                  codec: str = "jpeg") -> None:
    """Pack the tree with the packdata CLI unless dst already holds all of its files
    (tiles=True: decode-aware packing, `packdata --tiles`; codec="coeffs": `--codec coeffs`)."""
    from fastloader.decode.tiles import DEFAULT_RESTART_MCUS
    from fastloader.format.open import open_dataset

    try:
        with open_dataset(dst) as ds:
            option = ds.manifest.options.get("tiles") or {}
            # A tiled copy made with another segment size would time another packing.
            current = not tiles or option.get("restart_mcus") == DEFAULT_RESTART_MCUS
            current = current and ds.manifest.options.get("codec", "jpeg") == codec
            if len(ds) == _tree_files(tree) and ds.tiled == tiles and current:
                return
    except Exception:  # missing, partial or stale: pack it again
        pass
    packdata = Path(sys.executable).with_name("packdata")
    argv = [str(packdata), str(tree), str(dst), "--overwrite"] + (["--quiet"] if quiet else [])
    argv += ["--tiles"] if tiles else []
    argv += ["--codec", codec] if codec != "jpeg" else []
    print("$ " + " ".join(argv[:3] + argv[3:]), flush=True)
    subprocess.run(argv, check=True)


def _batch_count(batch: Any) -> int:
    if isinstance(batch, (list, tuple)):
        batch = batch[0]
    return int(batch.shape[0]) if hasattr(batch, "shape") else len(batch)


def dataloader_config(tree: Path, workers: int, batch: int, images: int, warmup: int) -> Factory:
    """torch DataLoader over the files with torchvision-style transforms."""
    dataset = ImageFolder(tree, train_transform(SIZE))

    def run() -> RunResult:
        def make() -> torch.utils.data.DataLoader:
            return torch.utils.data.DataLoader(
                dataset, batch_size=batch, shuffle=True, num_workers=workers,
                pin_memory=torch.cuda.is_available(),
            )

        return timed_iteration(make, _batch_count, images, warmup)

    return run


def fastloader_config(
    path: Path, batch: int, images: int, warmup: int, threads: int | None, seeds: Iterator[int]
) -> Factory:
    """FastLoader over a packed dataset with the same transforms."""
    import fastloader

    def run() -> RunResult:
        options: dict[str, Any] = {"num_threads": threads} if threads else {}
        loader = fastloader.FastLoader(
            str(path), batch_size=batch, shuffle=True, seed=next(seeds),
            transforms=[fastloader.RandomResizedCrop(SIZE), fastloader.RandomHorizontalFlip()],
            normalize=(IMAGENET_MEAN, IMAGENET_STD), **options,
        )
        try:
            result = timed_iteration(lambda: loader, _batch_count, images, warmup)
            stats = getattr(loader, "stats", None)
            if callable(stats):
                result.extra["loader_stats"] = _jsonable(stats())
            return result
        finally:
            getattr(loader, "close", lambda: None)()

    return run


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.generic,)):
        return value.item()
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def ceiling_config(path: Path, batch: int, images: int, warmup: int) -> Factory:
    """Native full-image decode + resize to 224 on all cores: the limit without crop-aware
    decode (no crop, no normalize, no tensor conversion)."""
    from fastloader.decode.decode import BatchDecoder
    from fastloader.format.open import open_dataset

    def run() -> RunResult:
        ds = open_dataset(path)
        decoder = BatchDecoder(cores(), backend="native")
        out = np.empty((batch, SIZE, SIZE, 3), np.uint8)

        def batches() -> Iterator[np.ndarray]:
            order = np.random.default_rng(0).permutation(len(ds))
            for start in range(0, len(order) - batch + 1, batch):
                records = [ds.record(int(i)) for i in order[start : start + batch]]
                errors = decoder.decode_into(
                    records, np.zeros((batch, 4), np.int32), np.zeros(batch, np.bool_), out
                )
                if any(errors):
                    raise RuntimeError(f"decode failed: {next(e for e in errors if e)}")
                yield out

        try:
            return timed_iteration(batches, _batch_count, images, warmup)
        finally:
            decoder.close()
            ds.close()

    return run


def dali_config(tree: Path, batch: int, images: int, warmup: int) -> Factory:
    """NVIDIA DALI's own CPU pipeline: file reader, random-crop decode, resize, flip, normalize."""
    from nvidia.dali import fn, pipeline_def, types

    # device_id=None: a CPU-only pipeline (DALI's stubs type it as int).
    @pipeline_def(batch_size=batch, num_threads=cores(), device_id=None)  # type: ignore[call-overload]
    def pipeline() -> tuple[Any, Any]:
        jpegs, labels = fn.readers.file(file_root=str(tree), random_shuffle=True, name="files")
        decoded = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)  # type: ignore[attr-defined]
        resized = fn.resize(decoded, resize_x=SIZE, resize_y=SIZE)
        images_out = fn.crop_mirror_normalize(
            resized,  # type: ignore[arg-type]
            dtype=types.FLOAT,  # type: ignore[attr-defined]
            output_layout="CHW",
            mean=[m * 255 for m in IMAGENET_MEAN], std=[s * 255 for s in IMAGENET_STD],
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return images_out, labels

    def run() -> RunResult:
        pipe = pipeline()

        def batches() -> Iterator[Any]:
            pipe.build()
            per_epoch = pipe.epoch_size("files") // batch
            for _ in range(per_epoch):
                out_images, _labels = pipe.run()
                yield torch.from_numpy(out_images.as_array())

        return timed_iteration(batches, _batch_count, images, warmup)

    return run


def optional_rows() -> dict[str, str]:
    """Why each optional competitor is skipped here (empty when all are importable)."""
    skipped = {}
    try:
        import nvidia.dali  # noqa: F401
    except Exception as exc:  # any import failure means: no DALI row
        skipped["DALI CPU pipeline"] = (
            f"nvidia.dali is not importable ({type(exc).__name__}: {exc}); "
            "pip install nvidia-dali-cuda120"
        )
    try:
        import ffcv  # noqa: F401

        skipped["FFCV"] = "ffcv imports, but no FFCV row is implemented (untested here)"
    except Exception:
        skipped["FFCV"] = (
            "ffcv is not importable; `pip install ffcv` fails to build here "
            "(it needs OpenCV 4 and libturbojpeg development files found by pkg-config)"
        )
    return skipped


def build_configs(
    args: argparse.Namespace, tree: Path, packed: dict[str, Path]
) -> dict[str, Factory]:
    """Every row of the comparison, in the order they are run within a round."""
    import fastloader

    seeds = iter(range(10**9))
    rows: dict[str, Factory] = {}
    for w in args.workers:
        rows[f"DataLoader workers={w}"] = dataloader_config(
            tree, w, args.batch, args.images, args.warmup
        )
    for label, path in packed.items():
        rows[f"FastLoader {label}"] = fastloader_config(
            path, args.batch, args.images, args.warmup, args.threads, seeds
        )
    if args.ceiling and fastloader.native_available() and "LMDB" in packed:
        rows["native full decode+resize, all cores"] = ceiling_config(
            packed["LMDB"], args.batch, args.images, args.warmup
        )
    if args.dali and "DALI CPU pipeline" not in optional_rows():
        rows["DALI CPU pipeline"] = dali_config(tree, args.batch, args.images, args.warmup)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The comparison as a markdown table, speed-up against the best DataLoader row."""
    best = best_dataloader(rows)
    header = ["loader", "img/s median (min-max)", "vs best DataLoader",
              "same-round ratio median (min-max)", "peak RSS MB (sum)", "peak PSS MB",
              "CPU ms/img", "first batch s"]
    body = []
    for row in rows:
        rate = row["img_per_s"]["median"]
        ratio = f"{rate / best['img_per_s']['median']:.2f}x" if best else "-"
        paired = row.get("paired_speedup")
        first = row["first_batch_s"]
        body.append([
            row["name"], spread_text(row["img_per_s"]), ratio,
            spread_text(paired, digits=2) if paired else "-", f"{row['peak_rss_mb']:.0f}",
            f"{row['peak_pss_mb']:.0f}", f"{1000 * row['cpu_s_per_img']['median']:.2f}",
            f"{first['median']:.2f}" if first else "-",
        ])
    return format_table(header, body)


def run_benchmark(
    args: argparse.Namespace, tree: Path, packed: dict[str, Path]
) -> list[dict[str, Any]]:
    """Warm up, run all rows interleaved, write JSON lines, return the summary rows."""
    configs = build_configs(args, tree, packed)
    # Optional competitors are reported as skipped only when they were asked for.
    skipped = {k: v for k, v in optional_rows().items() if k not in configs} if args.dali else {}
    # The sweep over-subscribes small machines on purpose; torch's advice is expected here.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    with JsonlWriter(args.out, "loader") as writer:
        writer.write({
            "kind": "config", "batch": args.batch, "images": args.images,
            "warmup_batches": args.warmup, "repeats": args.repeats, "tree": str(tree),
            "files": _tree_files(tree),
        })
        results = run_interleaved(
            configs, args.repeats,
            on_run=lambda name, i, run, usage: writer.write(run_row(name, i, run, usage)),
            on_pass=lambda stage, name: print(f"{stage}: {name}", flush=True),
        )
        rows = [summary_row(name, runs) for name, runs in results.items()]
        best = best_dataloader(rows)
        paired = paired_speedups(results, best["name"]) if best else {}
        for row in rows:
            if best:
                ratio = row["img_per_s"]["median"] / best["img_per_s"]["median"]
                row["speedup_vs_best_dataloader"] = ratio
                row["paired_speedup"] = paired[row["name"]]
            writer.write(row)
        for name, reason in skipped.items():
            writer.write({"kind": "skipped", "name": name, "reason": reason})
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=None,
                        help="ImageFolder tree (default: generate bench_data/images); packed "
                             "copies go next to it as NAME.lmdb and NAME.h5 if missing")
    parser.add_argument("--count", type=int, default=1000, help="images in the generated tree")
    parser.add_argument("--images", type=int, default=800, help="timed images per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=2, help="untimed batches at each run start")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 3],
                        help="DataLoader num_workers values to sweep")
    parser.add_argument("--threads", type=int, default=None,
                        help="FastLoader num_threads (default: the loader's own default)")
    parser.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                        help="skip the native full-decode row")
    parser.add_argument("--no-others", dest="dali", action="store_false",
                        help="skip the optional DALI and FFCV rows")
    parser.add_argument("--formats", nargs="*",
                        default=["LMDB", "HDF5", "tiled LMDB", "coeffs LMDB"],
                        choices=["LMDB", "HDF5", "tiled LMDB", "coeffs LMDB"],
                        help="packed copies to load; 'tiled LMDB' is packed with --tiles, "
                             "'coeffs LMDB' with --codec coeffs (both need the native "
                             "extension, skipped without it)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "loader.jsonl")
    parser.add_argument("--quick", action="store_true",
                        help="300 images, 2 repeats, workers 0 and 2")
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.images, args.repeats = min(args.count, 300), min(args.images, 192), 2
        args.workers = [0, 2]
    if min(args.images, args.repeats, args.batch, args.count) < 1 or args.warmup < 0:
        parser.error("--images, --repeats, --batch and --count must be >= 1, --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tree = args.data
    if tree is None:
        tree = DEFAULT_TREE
        ensure_tree(tree, args.count)
    import fastloader

    suffix = {"LMDB": ".lmdb", "HDF5": ".h5", "tiled LMDB": ".tiled.lmdb",
              "coeffs LMDB": ".coeffs.lmdb"}
    native_only = ("tiled LMDB", "coeffs LMDB")
    formats = [f for f in args.formats if f not in native_only or fastloader.native_available()]
    if len(formats) < len(args.formats):
        print("skipped FastLoader tiled/coeffs LMDB: packing them needs the native extension")
    packed = {f: tree.parent / (tree.name + suffix[f]) for f in formats}
    for label, path in packed.items():
        ensure_packed(tree, path, tiles=label == "tiled LMDB",
                      codec="coeffs" if label == "coeffs LMDB" else "jpeg")
    torch.set_num_threads(cores())
    rows = run_benchmark(args, tree, packed)
    print(table(rows))
    print(env_line(environment()))
    print(f"batch {args.batch}, {args.images} timed images per run after {args.warmup} warm-up "
          f"batches, {args.repeats} interleaved repeats; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
