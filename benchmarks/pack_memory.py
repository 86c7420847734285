"""Packer memory against dataset size: trees of N tiny JPEGs, each packed in a fresh subprocess.

The driver's peak RSS above its baseline (the interpreter with fastloader's pack modules,
numpy and Pillow imported, before the scan) divided by N is the per-file state the packer
holds; the workers' peak RSS (the largest pool worker, from RUSAGE_CHILDREN) must not grow
with N. `bench_pack.py --memory 50000,200000,1000000` runs it; `--memory-phase listing`
measures the listing and plan alone (scan, the shard plan cut and saved, the resume check
over every shard), for sizes a full pack of would
take too long on a small machine.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLASSES = 1000  # ImageNet-like: 1000 class folders, names like n01440764/n01440764_10026.JPEG
PHASES = ("pack", "listing")
# 4 MiB shards: ~6,600 tiny files each. With the local engine the shard being written is held
# by the driver (its records and their entries: bounded by the shard, at most
# plan.MAX_SHARD_FILES files, not the dataset), so a shard size well under the tree's bytes
# keeps that constant out of the per-file slope.
DEFAULT_SHARD_SIZE = 4 << 20


def tiny_jpeg() -> bytes:
    """One valid 8x8 baseline JPEG (a few hundred bytes)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (120, 30, 200)).save(buffer, format="JPEG", quality=80)
    return buffer.getvalue()


def class_name(label: int) -> str:
    return f"n{1440764 + label * 97:08d}"


def make_tiny_tree(root: Path, count: int, classes: int = CLASSES) -> Path:
    """root/<class>/<class>_<k>.JPEG: count copies of one tiny JPEG (written once per name).

    Reused when root's stamp says it already holds this many files in this many classes.
    """
    stamp = root / ".tiny-tree.json"
    wanted = {"count": count, "classes": classes}
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return root
    if root.exists():
        shutil.rmtree(root)
    data = tiny_jpeg()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for label in range(classes):
        name = class_name(label)
        folder = root / name
        folder.mkdir(parents=True)
        for k in range(label, count, classes):  # round robin: class sizes differ by at most 1
            fd = os.open(folder / f"{name}_{k}.JPEG", flags, 0o644)
            os.write(fd, data)
            os.close(fd)
    stamp.write_text(json.dumps(wanted))
    return root


class _WorkerSampler:
    """Polls the pool workers' private memory (USS: pages not shared with the driver) on a
    thread, every 0.2 s; RSS also counts the pages they inherited from the driver at fork."""

    def __init__(self) -> None:
        import threading

        import psutil

        self.peak_uss = 0
        self._me = psutil.Process()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        import contextlib

        import psutil

        while not self._done.wait(0.2):
            for child in self._me.children():
                with contextlib.suppress(psutil.Error):  # a worker that just exited
                    self.peak_uss = max(self.peak_uss, child.memory_full_info().uss)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that across exec, so a
    subprocess would report its parent's peak (the benchmark's, with torch imported) when
    that is higher."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _child(tree: Path, dst: Path, phase: str, workers: int, shard_size: int) -> dict[str, Any]:
    """Runs in the measured subprocess: baseline RSS, then the phase, then the peaks."""
    import gc

    import numpy  # noqa: F401  (imported by the pack before the scan: part of the baseline)
    import PIL.Image  # noqa: F401

    from fastloader.pack.engines.local import pending_shards
    from fastloader.pack.pipeline import tree as write_mod
    from fastloader.pack.pipeline.samples import importer_plan
    from fastloader.pack.sources.formats.image_folder import open_tree
    from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE
    from fastloader.pack.staging import plan as plan_mod
    from fastloader.pack.staging.items import items_of
    from fastloader.pack.staging.journal import Staging
    from fastloader.pack.staging.part import identity

    gc.collect()
    baseline = _rss_bytes()
    t0 = time.perf_counter()
    if phase == "pack":
        sampler = _WorkerSampler()
        manifest = write_mod.pack(tree, dst, workers=workers, quiet=True, shard_size=shard_size)
        sampler.stop()
        files = manifest.num_samples
    else:
        samples, specs, source = open_tree(str(tree), DEFAULT_MAX_FILE_SIZE, None)
        files = len(samples)
        # the listing's arrays, keyed and cut
        plan = importer_plan(samples, specs, source, {"kind": "imagefolder"}, shard_size, True)
        staging = Staging(dst)
        staging.open({"listing": True}, resume=False)
        plan.save(staging.dir)
        settings = plan_mod.TaskSettings("lmdb", shard_size, None, 90, 1 << 30,
                                         fields=plan.fields)
        keys = identity(items_of(plan, settings), plan)  # what each part must be made of
        pending_shards(staging.dir, plan, True, keys)  # the resume check over every shard
        staging.release()
        shutil.rmtree(staging.dir)
    seconds = time.perf_counter() - t0
    kib = 1024  # ru_maxrss is in KiB on Linux
    return {
        "phase": phase, "files": files, "seconds": seconds, "baseline_bytes": baseline,
        "driver_peak_bytes": _peak_rss_bytes(),
        "worker_peak_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * kib,
        "worker_peak_uss_bytes": sampler.peak_uss if phase == "pack" else 0,
        "shard_size": shard_size,
    }


def measure(tree: Path, dst: Path, phase: str, workers: int,
            shard_size: int = DEFAULT_SHARD_SIZE) -> dict[str, Any]:
    """Pack (or list) tree in a fresh interpreter; its peaks and the per-file driver bytes."""
    if dst.exists():
        shutil.rmtree(dst)
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "import json, pack_memory as m; from pathlib import Path; "
            f"print(json.dumps(m._child(Path({str(tree)!r}), Path({str(dst)!r}), "
            f"{phase!r}, {workers}, {shard_size})))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if dst.exists():
        shutil.rmtree(dst)
    growth = row["driver_peak_bytes"] - row["baseline_bytes"]
    row["driver_bytes_per_file"] = growth / max(row["files"], 1)
    return row


def run(sizes: list[int], work: Path, phases: list[str], workers: int,
        shard_size: int = DEFAULT_SHARD_SIZE, keep: bool = False,
        on_row: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """One row per size and phase (each also to on_row, as soon as measured): generate the
    tree under work, measure, delete the tree (unless keep)."""
    rows = []
    for count in sizes:
        tree = make_tiny_tree(work / f"tiny-{count}", count)
        for phase in phases:
            row = measure(tree, work / f"tiny-{count}.lmdb", phase, workers,
                          shard_size) | {"n": count}
            rows.append(row)
            print(format_row(row), flush=True)
            if on_row is not None:
                on_row(row)
        if not keep:
            shutil.rmtree(tree)
    return rows


def format_row(row: dict[str, Any]) -> str:
    mib = 1 << 20
    return (f"{row['phase']:8s} n={row['n']:>9,d}  files={row['files']:>9,d}  "
            f"{row['seconds']:7.1f} s  driver baseline {row['baseline_bytes'] / mib:6.1f} MiB  "
            f"peak +{(row['driver_peak_bytes'] - row['baseline_bytes']) / mib:7.1f} MiB  "
            f"= {row['driver_bytes_per_file']:6.0f} B/file  "
            f"worker peak RSS {row['worker_peak_bytes'] / mib:6.1f} MiB "
            f"(private {row['worker_peak_uss_bytes'] / mib:5.1f} MiB)")
