"""Opening a packed dataset at 10^6..10^7 samples: open time, first-batch time, RSS per process.

The dataset is synthetic where only its size matters: a real HDF5 dataset of 64 small JPEGs is
packed, then a copy is made whose index says N samples in --shards shards, each shard a hard
link to the real one and each sample a record of it (offset, length, crc32, shape and label of
record i % 64, a 12-byte source path of its own). Its index is what packdata writes for N
samples (61 bytes a sample), so opening it costs what opening a real one of that size does.

Each measurement is a fresh interpreter (numpy, torch and fastloader imported: the baseline).
It opens the dataset (`open_dataset`), then builds a shuffled FastLoader over it and takes its
first batch of 64 (device="cpu", one thread, rank 0 of --world), and reports the seconds of
each and the RSS above the baseline after the batch (VmRSS; the peak VmHWM; its private part
RssAnon and its file-backed part RssFile: page-cache pages, shared by every process that maps
them, which a kernel with large page-cache folios (6.x, ext4) maps ~1 MB at a time). Sides:
`before` runs the code of --before-src (a checkout of the commit before this change, run with
the same extension); `after-first` is this checkout's first open of a version (no stamp yet: it
hashes and checks the index and writes the stamp), `after` the opens that follow (the stamp
matches); each --side LABEL=SRC another checkout's, after the stamp is written. Rounds
interleave the sides; the table gives medians (min-max).
The index files are in the page cache (just written), or, with --cold, evicted from it
(posix_fadvise DONTNEED) before each run: the before side then reads the whole index from disk,
the after side the pages its batches touch.

    python benchmarks/bench_open_scale.py --sizes 1000000,10000000 --before-src /tmp/before/src
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from harness import env_line, environment, spread_text, summarize

RECORDS = 64  # real records in the one real shard

CHILD = """
import json, os, sys, time
if os.environ.get("BENCH_SRC"):  # the other checkout: past the editable install's redirect
    sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, os.environ["BENCH_SRC"])
import numpy, torch
import fastloader
from fastloader import open_dataset

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

base_rss, base_anon, base_file = status("VmRSS:"), status("RssAnon:"), status("RssFile:")
started = time.perf_counter()
ds = open_dataset(sys.argv[1])
opened = time.perf_counter()
open_rss = status("VmRSS:") - base_rss
loader = fastloader.FastLoader(ds, batch_size=64, device="cpu", num_threads=1, shuffle=True,
                               seed=0, transforms=[fastloader.RandomResizedCrop(32)],
                               rank=0, world_size=int(sys.argv[2]))
images, labels = next(iter(loader))
batch = time.perf_counter()
print(json.dumps({"open_s": opened - started, "first_batch_s": batch - opened,
                  "open_rss": open_rss, "rss": status("VmRSS:") - base_rss,
                  "peak": status("VmHWM:") - base_rss, "anon": status("RssAnon:") - base_anon,
                  "file": status("RssFile:") - base_file,
                  "batch": list(images.shape), "code": fastloader.__file__}))
"""


def _real_dataset(work: Path) -> Path:
    from PIL import Image

    from fastloader.pack.pipeline.tree import pack

    rng = np.random.default_rng(0)
    for i in range(RECORDS):
        folder = work / "tree" / f"c{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 255, (24 + i % 9, 28 + i % 7, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=80)
    pack(work / "tree", work / "real.h5", workers=1, quiet=True)
    return work / "real.h5"


def _paths(n: int) -> tuple[np.ndarray, np.ndarray]:
    """12-byte source paths "NNNNNNNN.jpg" for n samples, built in chunks (no n strings)."""
    width = 12
    blob = np.empty((n, width), np.uint8)
    powers = 10 ** np.arange(7, -1, -1, dtype=np.int64)
    for lo in range(0, n, 1 << 20):
        ids = np.arange(lo, min(n, lo + (1 << 20)), dtype=np.int64)
        blob[lo:lo + ids.size, :8] = (ids[:, None] // powers) % 10 + 48
    blob[:, 8:] = np.frombuffer(b".jpg", np.uint8)
    return np.arange(n + 1, dtype=np.int64) * width, blob.reshape(-1)


def synthetic(real: Path, n: int, shards: int, dst: Path) -> Path:
    """A copy of `real` whose index holds n samples in `shards` hard-linked shards."""
    from fastloader.format import index as index_mod
    from fastloader.format.dataset import PackedDataset
    from fastloader.format.manifest import ShardInfo, read_manifest

    manifest = read_manifest(real)
    with PackedDataset(real) as ds:
        columns = {"offset": ds.offsets, "length": ds.lengths, "label": ds.labels,
                   "shape": ds.shapes, "codec": ds.codecs, "crc32": ds.crc32s}
        columns = {name: np.array(a) for name, a in columns.items()}
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    source = manifest.shards[0]
    starts = np.arange(shards + 1, dtype=np.int64) * n // shards  # sizes differ by <= 1
    infos = []
    for k in range(shards):
        name = f"shard-{k:05d}.h5"
        os.link(real / source.file, dst / name)
        infos.append(ShardInfo(name, int(starts[k]), int(starts[k + 1] - starts[k]),
                               source.bytes, source.sha256, source.data_offset))
    record = np.arange(n, dtype=np.int64) % RECORDS
    arrays = {name: a[record] for name, a in columns.items()}
    shard_of = np.searchsorted(starts[1:], np.arange(n, dtype=np.int64), side="right")
    arrays["shard"] = shard_of.astype(np.int32)
    arrays["path_offsets"], arrays["path_bytes"] = _paths(n)
    manifest.fields = index_mod.write_index(dst, arrays)
    manifest.shards, manifest.num_samples = infos, n
    manifest.write(dst)
    return dst


def evict(path: Path) -> None:
    """Drop the dataset's files from the page cache (clean pages: no privilege needed)."""
    for member in path.rglob("*"):
        if member.is_file():
            fd = os.open(member, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def measure(path: Path, src: Path | None, stamps: Path, world: int) -> dict[str, Any]:
    env = dict(os.environ, FASTLOADER_CACHE_DIR=str(stamps), FASTLOADER_DISABLE_NATIVE="")
    if src is not None:  # the other checkout's modules, the installed extension beside them
        env["BENCH_SRC"] = str(src)
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(world)],
                          capture_output=True, text=True, env=env, timeout=600)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _other_tree(src: Path) -> Path:
    """src with the installed extension module linked in (it is built into site-packages)."""
    import fastloader

    core = next(Path(fastloader.__file__).parent.glob("_core*.so"), None)
    if core is None:
        import importlib.util

        spec = importlib.util.find_spec("fastloader._core")
        core = Path(spec.origin) if spec and spec.origin else None
    target = src / "fastloader"
    if core is not None and not any(target.glob("_core*.so")):
        (target / core.name).symlink_to(core)
    return src


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--world", type=int, default=8, help="the loader is rank 0 of these")
    parser.add_argument("--before-src", type=Path, default=None,
                        help="src/ of a checkout of the code before (omit: after only)")
    parser.add_argument("--side", action="append", default=[], metavar="LABEL=SRC",
                        help="another checkout's src/ run after the stamp is written, e.g. "
                             "this change merged with another branch")
    parser.add_argument("--cold", action="store_true",
                        help="evict the dataset's files from the page cache before each run")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "open_scale.jsonl")
    parser.add_argument("--quick", action="store_true", help="100,000 samples, one round")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeat = "100000", 1
    work = args.work or Path(tempfile.mkdtemp(prefix="open-scale-"))
    real = _real_dataset(work)
    sources: dict[str, Path | None] = {"after-first": None, "after": None}
    if args.before_src:
        sources = {"before": _other_tree(args.before_src), **sources}
    for side in args.side:
        label, _, src = side.partition("=")
        sources[label] = _other_tree(Path(src))
    sides = list(sources)
    records: list[dict[str, Any]] = [{"type": "env", **environment()}]
    table = []
    for n in (int(s) for s in args.sizes.split(",")):
        path = synthetic(real, n, args.shards, work / f"n{n}.h5")
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for round_index in range(args.repeat):
            stamps = work / f"stamps-{n}-{round_index}"  # after-first: no stamp yet
            for side in sides:
                if args.cold:
                    evict(path)
                result = measure(path, sources[side], stamps, args.world)
                runs[side].append(result)
                records.append({"type": "run", "samples": n, "side": side,
                                "round": round_index, **result})
        for side, results in runs.items():
            table.append((n, side, results))
        shutil.rmtree(path)
    _print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    print(env_line(records[0]))


def _cell(results: list[dict[str, Any]], key: str, scale: float, digits: int = 0) -> str:
    return spread_text(summarize([r[key] * scale for r in results]), digits)


def _print(table: list[tuple[int, str, list[dict[str, Any]]]]) -> None:
    print("| samples | code | open ms | first batch ms | open + batch ms | RSS above baseline "
          "MB | peak MB | private MB | shared file pages MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    mb = 1 / 2**20
    for n, side, results in table:
        for r in results:
            r["total_s"] = r["open_s"] + r["first_batch_s"]
        cell = functools.partial(_cell, results)
        print(f"| {n:,} | {side} | {cell('open_s', 1000)} | {cell('first_batch_s', 1000)} | "
              f"{cell('total_s', 1000)} | {cell('rss', mb)} | {cell('peak', mb)} | "
              f"{cell('anon', mb)} | {cell('file', mb)} |")


if __name__ == "__main__":
    main()
