"""Datasets in object storage: local disk vs S3 on loopback (cold and warm cache), plus the
shard-aware shuffle's quality against a full shuffle.

Speed: the same packed dataset read by FastLoader from local disk, from moto's S3 server (a
separate process on 127.0.0.1) with an empty cache, and with a warm one; images/s over a pass
and time to first batch; the three run interleaved, round after round; medians reported.
Quality: numpy only, on a class-sorted dataset (each shard holds one class, the worst case):
how often consecutive samples share a label, and how many classes a batch holds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from fastloader.loader.order.shard_shuffle import shard_epoch_indices
from make_images import ensure_tree


def shuffle_quality(shards: int = 100, per_shard: int = 1000, batch: int = 256,
                    windows: tuple[int, ...] = (1, 2, 4, 8, 16, 32)) -> list[dict[str, Any]]:
    """Per order: P(label[i] == label[i+1]), mean distinct classes per batch, mean |jump|/N."""
    counts = np.full(shards, per_shard, dtype=np.int64)
    starts = np.arange(shards, dtype=np.int64) * per_shard
    n = shards * per_shard
    orders: dict[str, np.ndarray] = {"full shuffle": np.random.default_rng(0).permutation(n)}
    for w in windows:
        orders[f"window W={w}"] = shard_epoch_indices(starts, counts, 0, 0, 0, 1, w, True, False)
    rows = []
    for name, order in orders.items():
        labels = order // per_shard
        usable = len(order) // batch * batch
        per_batch = [len(np.unique(b)) for b in labels[:usable].reshape(-1, batch)]
        rows.append({"order": name, "same_label_next": float(np.mean(labels[1:] == labels[:-1])),
                     "classes_per_batch": float(np.mean(per_batch)),
                     "mean_jump": float(np.mean(np.abs(np.diff(order))) / n)})
    return rows


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_s3() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", "from moto.server import main; main()",
                             "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint})
    return proc, endpoint


def one_pass(data: str, cache: Path | None, batch: int, threads: int,
             prefetch: int = 2) -> dict[str, float]:
    from fastloader.loader.loader import FastLoader

    extra: dict[str, Any] = {} if cache is None else {"cache_dir": cache,
                                                      "prefetch_shards": prefetch}
    began = time.perf_counter()
    loader = FastLoader(data, batch_size=batch, shuffle=True, shuffle_window=8,
                        num_threads=threads, transforms=_transforms(), **extra)
    first = None
    images = 0
    for x, _ in loader:
        if first is None:
            first = time.perf_counter() - began
        images += len(x)
    total = time.perf_counter() - began
    loader.close()
    after_first = images - batch
    return {"img_s": images / total, "first_batch_s": first or 0.0,
            "img_s_after_first": after_first / max(1e-9, total - (first or 0.0))}


def _transforms() -> list[Any]:
    from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop

    return [RandomResizedCrop(224), RandomHorizontalFlip()]


def speed(count: int, rounds: int, batch: int, threads: int, work: Path) -> dict[str, Any]:
    from fastloader.pack.pipeline.tree import pack
    from fastloader.pack.staging.upload import upload

    tree = work / "tree"
    with contextlib.redirect_stdout(sys.stderr):  # its stats, off the JSON on stdout
        ensure_tree(tree, count)
    local = work / "data.lmdb"
    if not local.exists():
        pack(tree, local, shard_size=4 << 20, quiet=True)
    proc, _ = start_s3()
    try:
        import s3fs

        s3fs.S3FileSystem().mkdir("bench")
        upload(local, "s3://bench/data.lmdb")
        warm = work / "warm-cache"
        one_pass("s3://bench/data.lmdb", warm, batch, threads)  # fill it
        url = "s3://bench/data.lmdb"
        cold = work / "cold-cache"

        def cold_pass(prefetch: int) -> dict[str, float]:
            shutil.rmtree(cold, ignore_errors=True)
            return one_pass(url, cold, batch, threads, prefetch)
        configs = {"local": lambda: one_pass(str(local), None, batch, threads),
                   "s3 cold, prefetch 2": lambda: cold_pass(2),
                   "s3 cold, prefetch 4": lambda: cold_pass(4),
                   "s3 warm": lambda: one_pass(url, warm, batch, threads),
                   "s3 raw download (4 threads)": lambda: raw_download(local, url)}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
        names = list(configs)
        for r in range(rounds):  # interleaved, the order rotated each round
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(configs[name]())
    finally:
        proc.terminate()
        proc.wait()
    out: dict[str, Any] = {"dataset_mb": sum(p.stat().st_size for p in local.iterdir()) / 1e6}
    for name, rows in runs.items():
        out[name] = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        out[name]["vs_local"] = out[name]["img_s"] / statistics.median(
            r["img_s"] for r in runs["local"])
    return out


def raw_download(local: Path, url: str) -> dict[str, float]:
    """What the S3 server itself delivers: every shard fetched by 4 threads, no cache."""
    from concurrent.futures import ThreadPoolExecutor

    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    names = [p.name for p in local.iterdir() if p.suffix == ".mdb"]
    began = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        sizes = list(pool.map(lambda n: len(fs.cat_file(f"{root}/{n}")), names))
    seconds = time.perf_counter() - began
    return {"img_s": 0.0, "first_batch_s": 0.0, "img_s_after_first": 0.0,
            "mb_s": sum(sizes) / 1e6 / seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=600, help="images in the dataset")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None, help="folder for data (kept)")
    parser.add_argument("--quality-only", action="store_true")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"quality": shuffle_quality()}
    if not args.quality_only:
        work = args.work or Path(tempfile.mkdtemp(prefix="bench-remote-"))
        result["speed"] = speed(args.count, args.rounds, args.batch, args.threads, work)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
