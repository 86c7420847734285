"""Packing speed: packdata into LMDB and HDF5 against tar and cp -r of the same tree, same disk;
and the same images from a CSV table, from WebDataset .tar shards and from a Hugging Face
Parquet split (4 files written by `datasets`, Image + ClassLabel; the importers).
--engines: `--engine ray` against `--engine local` on the same tree and shard plan.
`--memory 50000,200000,1000000`: the packer's memory against dataset size instead (trees of
tiny JPEGs, one subprocess per pack; pack_memory.py)."""

from __future__ import annotations

import argparse
import functools
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness import (
    RESULTS_DIR,
    JsonlWriter,
    RunResult,
    env_line,
    environment,
    format_table,
    run_interleaved,
    run_row,
    spread_text,
    summary_row,
)
from make_images import ensure_tree

DEFAULT_TREE = Path(__file__).resolve().parent.parent / "bench_data" / "images"


def tree_size(tree: Path) -> tuple[int, int]:
    """(file count, total bytes) of the regular, non-hidden files under tree."""
    files = [p for p in tree.rglob("*") if p.is_file() and not p.name.startswith(".")]
    return len(files), sum(p.stat().st_size for p in files)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _command_run(argv: list[str], dst: Path, files: int) -> RunResult:
    _remove(dst)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True)
    elapsed = time.perf_counter() - t0
    _remove(dst)
    return RunResult(files, elapsed, files)


def _pack_run(tree: Path, dst: Path, files: int, workers: int | None) -> RunResult:
    from fastloader.pack.pipeline.tree import pack

    _remove(dst)
    t0 = time.perf_counter()
    pack(tree, dst, workers=workers, quiet=True)
    elapsed = time.perf_counter() - t0
    _remove(dst)
    return RunResult(files, elapsed, files)


def _import_run(src: Path | str, dst: Path, files: int, workers: int | None,
                **options: object) -> RunResult:
    import fastloader

    _remove(dst)
    t0 = time.perf_counter()
    fastloader.pack(src, dst, workers=workers, quiet=True, **options)
    elapsed = time.perf_counter() - t0
    _remove(dst)
    return RunResult(files, elapsed, files)


def make_sources(tree: Path, work: Path, shards: int = 4) -> tuple[Path, str]:
    """The tree as a CSV table (path,species) beside it and as WebDataset tars (x.jpg, x.cls),
    written once, untimed."""
    import tarfile

    images = sorted(p for p in tree.rglob("*") if p.is_file() and not p.name.startswith("."))
    classes = sorted({p.parent.name for p in images})
    table = work / "table.csv"  # paths relative to the tree (root=tree)
    lines = ["path,species"] + [f"{p.relative_to(tree)},{p.parent.name}" for p in images]
    table.write_text("\n".join(lines) + "\n")
    per = -(-len(images) // shards)
    for k in range(shards):
        with tarfile.open(work / f"wds-{k:03d}.tar", "w") as tar:
            for n, image in enumerate(images[k * per:(k + 1) * per], k * per):
                tar.add(image, f"s{n:07d}.jpg")
                label = str(classes.index(image.parent.name)).encode()
                info = tarfile.TarInfo(f"s{n:07d}.cls")
                info.size = len(label)
                tar.addfile(info, io.BytesIO(label))
    return table, str(work / f"wds-{{000..{shards - 1:03d}}}.tar")


def make_parquet_split(tree: Path, work: Path, shards: int = 4) -> str:
    """The tree as a Hugging Face split (image bytes + ClassLabel) written by `datasets` as
    `shards` Parquet files, the Hub's way (train-0000k-of-0000n.parquet); their brace pattern.
    Untimed."""
    import datasets

    images = sorted(p for p in tree.rglob("*") if p.is_file() and not p.name.startswith("."))
    classes = sorted({p.parent.name for p in images})
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=classes)})
    split = datasets.Dataset.from_dict(
        {"image": [{"bytes": p.read_bytes(), "path": p.name} for p in images],
         "label": [classes.index(p.parent.name) for p in images]}, features=features)
    for k in range(shards):
        split.shard(shards, k).to_parquet(work / f"train-{k:05d}-of-{shards:05d}.parquet")
    return str(work / f"train-{{00000..{shards - 1:05d}}}-of-{shards:05d}.parquet")


def configs(tree: Path, work: Path, files: int, workers: int | None) -> dict:
    """Every way of turning the tree into one artefact on the work disk."""
    tar_dst, cp_dst = work / "tree.tar", work / "tree_copy"
    table, shards = make_sources(tree, work)
    tar = ["tar", "-cf", str(tar_dst), "-C", str(tree.parent), tree.name]
    cp = ["cp", "-r", str(tree), str(cp_dst)]
    runs: dict[str, Callable[[], RunResult]] = {
        "packdata -> LMDB": lambda: _pack_run(tree, work / "out.lmdb", files, workers),
        "packdata -> HDF5": lambda: _pack_run(tree, work / "out.h5", files, workers),
        "tar -cf": lambda: _command_run(tar, tar_dst, files),
        "cp -r": lambda: _command_run(cp, cp_dst, files),
        CSV: lambda: _import_run(table, work / "t.lmdb", files, workers, label="species",
                                 root=tree),
        "WebDataset tars -> LMDB": lambda: _import_run(shards, work / "w.lmdb", files, workers),
    }
    try:
        import datasets  # noqa: F401  (the test extra's; the row is left out without it)
    except ImportError:
        return runs
    split = make_parquet_split(tree, work)
    runs[PARQUET] = lambda: _import_run(split, work / "p.lmdb", files, workers)
    return runs


CSV, PARQUET = "CSV table -> LMDB", "HF Parquet split -> LMDB"


def _engine_run(tree: Path, dst: Path, files: int, engine: str, workers: int,
                shard_size: int) -> RunResult:
    from fastloader.pack.pipeline.tree import pack

    _remove(dst)
    t0 = time.perf_counter()
    manifest = pack(tree, dst, workers=workers, engine=engine, shard_size=shard_size, quiet=True)
    elapsed = time.perf_counter() - t0
    _remove(dst)
    return RunResult(files, elapsed, files, extra={"shards": len(manifest.shards)})


def _noop() -> None:
    return None


def _ray_task_overhead(ray: object, cores: int, tasks: int = 400) -> float:
    """Seconds of wall time per no-op Ray task with `cores` running at once (warm workers)."""
    noop = ray.remote(num_cpus=1)(_noop)  # type: ignore[attr-defined]
    ray.get([noop.remote() for _ in range(4 * cores)])  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    ray.get([noop.remote() for _ in range(tasks)])  # type: ignore[attr-defined]
    return (time.perf_counter() - t0) / tasks


def engine_rows(tree: Path, work: Path, files: int, total_bytes: int, workers: int | None,
                repeats: int, writer: JsonlWriter) -> list[dict]:
    """--engine ray vs --engine local, interleaved rounds on one shard plan (4 shards a core,
    so Ray's one-task-per-shard can use every core); Ray is started once, outside the timing
    (its start is reported apart), as a cluster would be."""
    import ray

    cores = workers or len(os.sched_getaffinity(0))
    shard_size = max(1 << 16, total_bytes // (4 * cores))
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    start_s = time.perf_counter() - t0
    try:
        overhead = _ray_task_overhead(ray, cores)
        runs = {f"--engine {e}": functools.partial(_engine_run, tree, work / f"{e}.lmdb", files,
                                                   e, cores, shard_size)
                for e in ("local", "ray")}
        results = run_interleaved(
            runs, repeats,
            on_run=lambda name, i, run, usage: writer.write(run_row(name, i, run, usage)))
    finally:
        ray.shutdown()
    rows = [summary_row(name, r) for name, r in results.items()]
    local = [run.rate for run, _ in results["--engine local"]]
    for row in rows:
        row["vs_local"] = statistics.median(
            run.rate / base for (run, _), base in zip(results[row["name"]], local, strict=True))
        row |= {"unit": "files", "cores": cores, "shard_size": shard_size,
                "shards": results[row["name"]][0][0].extra["shards"],
                "files_per_s_per_core": row["img_per_s"]["median"] / cores,
                "ray_start_s": start_s, "ray_task_overhead_ms": overhead * 1e3}
        writer.write(row)
    return rows


def print_engine_table(rows: list[dict], files: int, total_bytes: int, env: dict) -> None:
    header = ["engine", "files/s median (min-max)", "files/s per core", "vs local (same round)"]
    body = [[r["name"], spread_text(r["img_per_s"]), f"{r['files_per_s_per_core']:.0f}",
             f"{r['vs_local']:.2f}x"] for r in rows]
    print(format_table(header, body))
    first = rows[0]
    print(f"{files} files, {total_bytes / 1e6:.1f} MB in {first['shards']} shards of "
          f"{first['shard_size'] / 2**20:.1f} MiB; {first['cores']} cores; Ray start "
          f"{first['ray_start_s']:.1f} s (untimed); a no-op Ray task costs "
          f"{first['ray_task_overhead_ms']:.2f} ms of wall time with every core busy")
    print(env_line(env))


def print_table(rows: list[dict], total_bytes: int, files: int, env: dict) -> None:
    tar = next(r for r in rows if r["name"] == "tar -cf")
    mb = total_bytes / 1e6
    header = ["method", "files/s median (min-max)", "MB/s median", "s median", "vs tar",
              "vs packdata LMDB (same round, median)", "vs CSV table (same round, median)"]
    body = []
    for row in rows:
        rate = row["img_per_s"]["median"]
        body.append([
            row["name"], spread_text(row["img_per_s"]), f"{rate * mb / files:.1f}",
            f"{files / rate:.2f}", f"{rate / tar['img_per_s']['median']:.2f}x",
            f"{row.get('vs_imagefolder', 1.0):.2f}x", f"{row.get('vs_csv', 1.0):.2f}x",
        ])
    print(format_table(header, body))
    print(f"{files} files, {mb:.1f} MB; source tree in the page cache (every method reads hot)")
    print(env_line(env))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=None, help="image tree (default: generated)")
    parser.add_argument("--images", type=int, default=1000, help="size of the generated tree")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for outputs on the disk to measure (default: by the tree)")
    parser.add_argument("--workers", type=int, default=None, help="packdata workers (default all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "pack.jsonl")
    parser.add_argument("--quick", action="store_true", help="300 images, 2 repeats")
    parser.add_argument("--engines", action="store_true",
                        help="only --engine ray against --engine local (needs Ray)")
    parser.add_argument("--memory", default=None, metavar="N,N,...",
                        help="memory mode: pack generated trees of N tiny files each")
    parser.add_argument("--memory-phase", default="listing,pack",
                        help="memory mode: listing (scan, plan, resume check), pack, or both")
    parser.add_argument("--memory-shard-size", type=int, default=4 << 20,
                        help="memory mode: --shard-size of the packs (default 4 MiB)")
    parser.add_argument("--memory-keep", action="store_true",
                        help="memory mode: keep the generated trees (to reuse them)")
    args = parser.parse_args(argv)
    if args.memory:
        return memory_main(args)
    if args.quick:
        args.images, args.repeats = min(args.images, 300), min(args.repeats, 2)
    tree = args.data
    if tree is None:
        tree = DEFAULT_TREE
        ensure_tree(tree, args.images)
    files, total_bytes = tree_size(tree)
    work_parent = args.work or tree.parent
    work_parent.mkdir(parents=True, exist_ok=True)
    env = environment()
    if args.engines:
        with tempfile.TemporaryDirectory(dir=work_parent, prefix="bench_pack_") as tmp, \
                JsonlWriter(args.out, "pack") as writer:
            rows = engine_rows(tree, Path(tmp), files, total_bytes, args.workers, args.repeats,
                               writer)
        print_engine_table(rows, files, total_bytes, env)
        print(f"wrote {args.out}")
        return 0
    with tempfile.TemporaryDirectory(dir=work_parent, prefix="bench_pack_") as tmp:
        runs = configs(tree, Path(tmp), files, args.workers)
        with JsonlWriter(args.out, "pack") as writer:
            results = run_interleaved(
                runs, args.repeats,
                on_run=lambda name, i, run, usage: writer.write(run_row(name, i, run, usage)),
            )
            rows = [summary_row(name, r) for name, r in results.items()]
            for key, base in (("vs_imagefolder", "packdata -> LMDB"), ("vs_csv", CSV)):
                base_runs = [run.rate for run, _ in results[base]]
                for row in rows:  # each round's rate over the base's rate of that round
                    row[key] = statistics.median(
                        run.rate / b for (run, _), b in zip(results[row["name"]], base_runs,
                                                            strict=True))
            for row in rows:
                row["unit"] = "files"
                row["mb_per_s_median"] = row["img_per_s"]["median"] * total_bytes / 1e6 / files
                writer.write(row)
    print_table(rows, total_bytes, files, env)
    print(f"wrote {args.out}")
    return 0


def memory_main(args: argparse.Namespace) -> int:
    """Driver bytes per file and worker peaks for each tree size (pack_memory.py says how)."""
    import pack_memory

    sizes = [int(n) for n in args.memory.split(",")]
    phases = [p for p in args.memory_phase.split(",") if p in pack_memory.PHASES]
    work = args.work or DEFAULT_TREE.parent / "pack_memory"
    work.mkdir(parents=True, exist_ok=True)
    workers = args.workers or 2
    with JsonlWriter(args.out.with_name("pack_memory.jsonl"), "pack_memory") as writer:
        pack_memory.run(sizes, work, phases, workers, args.memory_shard_size,
                        args.memory_keep, on_row=lambda row: writer.write(
            row | {"name": f"{row['phase']} {row['n']}"}))
    print(env_line(environment()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
