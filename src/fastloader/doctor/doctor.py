"""`fastloader doctor DATASET`: run the loader for a bounded time, show where time goes, advise.

Also the home of profile(any_dataloader) (see fastloader.doctor.profile) and of the
`fastloader` console script (`fastloader doctor ...`, or `python -m fastloader.doctor.doctor ...`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psutil

from fastloader.decode.augment import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize
from fastloader.doctor.profile import (
    ProfileReport,
    machine_facts,
    profile,
    time_batches,
    timing_stats,
)
from fastloader.doctor.verdict import Machine, Verdict, diagnose
from fastloader.errors import FastloaderError
from fastloader.loader.packed.loader import PackedLoader
from fastloader.loader.pipeline.stats import LoaderStats
from fastloader.loader.remote.options import Remote

__all__ = ["DoctorReport", "ProfileReport", "diagnose", "main", "profile", "run_doctor"]

IMAGENET_NORMALIZE = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# (label, stats key, thread): the stages of the per-stage table, in data-flow order. The
# helper thread reads and plans batch b+1 while the producer decodes batch b, so its rows
# overlap the producer's: the shares add up per thread, not across threads.
TABLE_ROWS = (
    ("read records", "read", "helper*"),
    ("plan crops/flips", "plan", "helper*"),
    ("decode+crop+resize+flip", "decode", "producer"),
    ("wait for a free ring slot", "slot_wait", "producer"),
    ("copy/normalize", "copy", "consumer"),
    ("wait for a batch", "wait", "consumer"),
)
# On a CPU device the decode threads also lay samples out NCHW and normalize them, so the
# consumer's copy step only hands the batch over.
CPU_LABELS = {"decode": "decode+crop+resize+flip+normalize", "copy": "hand-over (CPU)"}
# On CUDA the copy row is device time from CUDA events (fastloader.gpu.timing): the H2D copy
# on the side stream plus the conversion and gpu_transforms on the consumer's stream. The
# host only enqueues that work, so its own clock would show almost nothing. Intervals are
# read once complete, so the total trails the GPU by the batches still in flight.
CUDA_LABELS = {"copy": "H2D copy+convert (GPU time)"}


@dataclass(frozen=True)
class DoctorReport:
    """A doctor run: the verdict's stats and machine facts, per-stage totals, the verdict."""

    stats: dict[str, float | str]
    machine: Machine
    verdict: Verdict


def transforms_for(kind: str, size: int
                   ) -> tuple[RandomResizedCrop | RandomHorizontalFlip | Resize | CenterCrop, ...]:
    """The usual ImageNet train or validation decode-time transforms at `size`."""
    if kind == "train":
        return (RandomResizedCrop(size), RandomHorizontalFlip())
    return (Resize(round(size * 256 / 224)), CenterCrop(size))


def _delta(after: LoaderStats, before: LoaderStats) -> dict[str, float]:
    """Counter growth over the timed part of the run (seconds and counts)."""
    a, b = after.as_dict(), before.as_dict()
    return {key: a[key] - b[key] for key in ("images", "batches", "read_s", "plan_s",
                                            "decode_s", "slot_wait_s", "copy_s", "wait_s")}


def _stage_stats(loader: PackedLoader, grown: dict[str, float], wall_s: float
                 ) -> dict[str, float | str]:
    batches = max(grown["batches"], 1)
    shapes = np.asarray(loader.dataset.shapes, dtype=np.float64)
    height, width = loader.image_size
    times: dict[str, float] = {f"{name}_ms": grown[f"{name}_s"] * 1000.0 / batches
                               for name in ("read", "plan", "decode", "slot_wait", "copy", "wait")}
    times.update({f"{name}_share": grown[f"{name}_s"] / wall_s if wall_s > 0 else 0.0
                  for name in ("read", "plan", "decode", "slot_wait", "copy", "wait")})
    times["slot_wait_fraction"] = times["slot_wait_share"]
    # The producer thread's own rows; read and plan overlap them on the helper thread.
    times["producer_thread_share"] = times["decode_share"] + times["slot_wait_share"]
    stats: dict[str, float | str] = dict(times)
    now = loader.stats()
    stats.update(batches_per_pass=len(loader), num_threads=now.num_threads, prefetch=now.prefetch,
                 autotune_state=now.autotune_state, ring_bytes=now.ring_bytes,
                 pinned=now.pinned, backend=now.backend, device=loader.device.type,
                 source_pixels=float((shapes[:, 0] * shapes[:, 1]).mean()) if len(shapes) else 0.0,
                 output_pixels=float(height * width), rss_bytes=psutil.Process().memory_info().rss)
    return stats


def remote_stats(after: LoaderStats, before: LoaderStats, wall_s: float
                 ) -> dict[str, float]:
    """The verdict's remote-worker figures over the timed part of the run (none without
    remote=): live workers, a worker's busy ms a batch, its busy and the producer's waiting
    shares of the wall, and the trainer's own decode rate."""
    old = {w.worker: w for w in before.remote_workers}
    grown = [(w, old.get(w.worker)) for w in after.remote_workers]
    workers = [(w, b) for w, b in grown if w.worker != "local" and w.state == "live"]
    if not workers or wall_s <= 0:
        return {}
    busy = [w.decode_s - (b.decode_s if b else 0.0) for w, b in workers]
    batches = sum(w.batches - (b.batches if b else 0) for w, b in workers)
    waited = sum(w.wait_s - (b.wait_s if b else 0.0) for w, b in workers)
    local = [(w.batches - (b.batches if b else 0)) for w, b in grown if w.worker == "local"]
    return {"remote_workers": float(len(workers)),
            "remote_ms": 1000.0 * sum(busy) / max(batches, 1),
            "remote_busy_share": sum(busy) / len(workers) / wall_s,
            "remote_wait_share": waited / wall_s,
            "local_batches_per_s": (local[0] if local else 0) / wall_s}


def run_doctor(path: str, *, seconds: float = 10.0, batch_size: int = 128,
               num_threads: int | str | None = "auto", prefetch: int | str = 2,
               step_ms: float | None = 120.0,
               transforms: str = "train", image_size: int = 224, device: str | None = None,
               simulate_step: bool = False, memory_budget: int | None = None,
               remote: Remote | None = None) -> DoctorReport:
    """Run a FastLoader over `path` for about `seconds` (after autotune settles) and judge it
    (with `remote`, its remote workers too)."""
    loader = PackedLoader(path, batch_size=batch_size, shuffle=True,
                        transforms=transforms_for(transforms, image_size),
                        normalize=IMAGENET_NORMALIZE, device=device, num_threads=num_threads,
                        prefetch=prefetch, memory_budget=memory_budget, remote=remote)
    marks: dict[str, LoaderStats] = {}

    def start() -> None:
        marks["before"] = loader.stats()
        psutil.cpu_percent(percpu=True)  # starts psutil's per-core interval

    with loader:
        timing = time_batches(
            loader, seconds=seconds, step_ms=step_ms if simulate_step else None, warmup=1,
            warm_until=lambda: loader.stats().autotune_state != "measuring",
            warmup_s=max(2.0, seconds), on_start=start)
        if "before" not in marks:
            raise FastloaderError(f"{path}: the dataset gave no batch to time; is it empty?")
        cpu = list(psutil.cpu_percent(percpu=True))
        stats = timing_stats(timing, step_ms if simulate_step else None)
        stats.update(_stage_stats(loader, _delta(loader.stats(), marks["before"]),
                                  timing.wall_s))
        stats.update(remote_stats(loader.stats(), marks["before"], timing.wall_s))
        stats.update(wall_s=timing.wall_s, warmup_s=timing.warmup_s, batch_size=batch_size,
                     simulated_s=timing.step_s)
    machine = machine_facts(cpu)
    return DoctorReport(stats, machine, diagnose(stats, machine, step_ms))


def format_report(report: DoctorReport) -> str:
    """The per-stage table, throughput, CPU per core, memory and the verdict, as text."""
    s, m = report.stats, report.machine
    labels = CPU_LABELS if s.get("device") == "cpu" else CUDA_LABELS
    lines = [f"{'stage':<36}{'thread':<10}{'ms/batch':>10}{'share of wall':>15}"]
    for label, key, thread in TABLE_ROWS:
        label = labels.get(key, label)
        lines.append(f"{label:<36}{thread:<10}{s[key + '_ms']:>10.2f}"
                     f"{100 * s[key + '_share']:>14.1f}%")
    if s["simulated_step_ms"]:
        lines.append(f"{'simulated step (sleep)':<36}{'consumer':<10}"
                     f"{s['simulated_step_ms']:>10.2f}"
                     f"{100 * float(s['simulated_s']) / max(float(s['wall_s']), 1e-9):>14.1f}%")
    cpu = " ".join(f"{p:.0f}%" for p in m["cpu_percent"])
    mean = sum(m["cpu_percent"]) / max(len(m["cpu_percent"]), 1)
    lines += [
        "* the helper reads and plans the next batch while this one decodes: its rows overlap",
        "  the producer's, so the shares add up per thread, not across threads. Producer",
        f"  thread: decode + slot wait = {100 * s['producer_thread_share']:.1f}% of the wall; "
        "the rest is its waits",
        "  for the helper and its restarts between passes.",
        "",
        f"timed {s['batches']} batches of {s['batch_size']} in {s['wall_s']:.1f} s "
        f"(after {s['warmup_s']:.1f} s warm-up): {s['images_per_s']:.1f} images/s, "
        f"{s['batch_ms']:.1f} ms/batch",
        f"next() per batch (wait + copy): median {s['wait_ms_median']:.2f} ms, "
        f"p90 {s['wait_ms_p90']:.2f} ms",
        f"settings: num_threads={s['num_threads']} prefetch={s['prefetch']} "
        f"(autotune {s['autotune_state']}), backend={s['backend']}",
        f"CPU per core ({m['cores']} usable): {cpu} (mean {mean:.0f}%)",
        f"memory: RSS {float(s['rss_bytes']) / 2**20:.0f} MiB, "
        f"ring {float(s['ring_bytes']) / 2**20:.1f} MiB"
        f" ({'pinned' if s['pinned'] else 'pageable'})",
        *_remote_lines(s),
        "",
        *report.verdict.lines(),
    ]
    return "\n".join(lines)


def _remote_lines(s: dict[str, float | str]) -> list[str]:
    """The remote workers' line of the report (none without remote=)."""
    if "remote_workers" not in s:
        return []
    return [f"remote workers: {float(s['remote_workers']):.0f} live, "
            f"{float(s['remote_ms']):.1f} ms a batch each, busy "
            f"{100 * float(s['remote_busy_share']):.0f}% of the wall; the producer waited for "
            f"them {100 * float(s['remote_wait_share']):.0f}%; the trainer decoded "
            f"{float(s['local_batches_per_s']):.1f} batches/s itself"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastloader doctor", description="Run the loader over a packed dataset for a "
        "bounded time; show time per stage, CPU and memory, and whether it can feed your step.")
    add = parser.add_argument
    add("dataset", help="a packed dataset folder (NAME.lmdb or NAME.h5)")
    add("--seconds", type=float, default=10.0, help="timed run length (default 10)")
    add("--batch-size", type=int, default=128)
    add("--num-threads", default="auto", type=_int_or_auto, help="an int or auto (default)")
    add("--prefetch", default=2, type=_int_or_auto, help="an int (default 2) or auto")
    add("--step-ms", type=float, default=120.0, help="your training step length (default 120)")
    add("--simulate-step", action="store_true",
        help="sleep --step-ms after each batch, like a GPU step, and measure the waits")
    add("--transforms", choices=("train", "val"), default="train")
    add("--image-size", type=int, default=224)
    add("--device", default=None, help="cpu or cuda (default: cuda when present)")
    add("--memory-budget", type=int, default=None, help="bytes of ring for --prefetch auto")
    add("--remote-workers", type=int, default=0,
        help="also decode on this many Ray workers (remote=fastloader.Remote(workers=N))")
    add("--ray-address", default=None, help="the Ray cluster of --remote-workers "
        "(default: a local one)")
    add("--json", action="store_true", help="print the measurements as JSON too")
    return parser


def _int_or_auto(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int or 'auto', got {text!r}") from None


def _run(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    report = run_doctor(args.dataset, seconds=args.seconds, batch_size=args.batch_size,
                        num_threads=args.num_threads, prefetch=args.prefetch,
                        step_ms=args.step_ms, transforms=args.transforms,
                        image_size=args.image_size, device=args.device,
                        simulate_step=args.simulate_step, memory_budget=args.memory_budget,
                        remote=(Remote(workers=args.remote_workers, address=args.ray_address)
                                if args.remote_workers else None))
    print(format_report(report))
    if args.json:
        print(json.dumps({"stats": report.stats, "machine": report.machine,
                          "verdict": report.verdict.__dict__}, indent=2, default=str))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The `fastloader` console script: `fastloader doctor DATASET [options]`; exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "doctor":
        args = args[1:]
    elif args[:1] == ["help"]:
        args = ["--help"]
    try:
        return _run(args)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    except FastloaderError as exc:
        print(f"fastloader doctor: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"fastloader doctor: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fastloader doctor: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
