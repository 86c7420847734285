"""Shared benchmark machinery: repeats, median and spread, resource use, environment, JSONL."""

from __future__ import annotations

import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"


# ---------------------------------------------------------------- statistics


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median with spread (min, max, quartiles) of repeated measurements."""
    if not values:
        raise ValueError("summarize() needs at least one value; run at least one repeat.")
    ordered = sorted(float(v) for v in values)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": q1,
        "q3": q3,
        "n": float(len(ordered)),
    }


def spread_text(summary: dict[str, float], digits: int = 0) -> str:
    """'median (min-max)' for a table cell."""
    fmt = f"{{:.{digits}f}}"
    median, low, high = (fmt.format(summary[k]) for k in ("median", "min", "max"))
    return f"{median} ({low}-{high})" if summary["n"] > 1 else median


# ---------------------------------------------------------------- environment


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _module_version(name: str) -> str | None:
    try:
        module = __import__(name)
    except Exception:  # an optional package may fail in any way on import
        return None
    return str(getattr(module, "__version__", "unknown"))


def _fastloader_native() -> bool | None:
    try:
        import fastloader

        return bool(fastloader.native_available())
    except Exception:  # the native module may be missing while the project is being built
        return None


def environment() -> dict[str, Any]:
    """What a reader needs to reproduce or judge a number: machine, versions, build."""
    from PIL import features

    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": _module_version("torch"),
        "numpy": _module_version("numpy"),
        "pillow": _module_version("PIL"),
        "pillow_libjpeg_turbo": features.version("libjpeg_turbo"),
        "fastloader": _module_version("fastloader"),
        "fastloader_native": _fastloader_native(),
        "fastloader_native_disabled_by_env": os.environ.get("FASTLOADER_DISABLE_NATIVE", ""),
        "git_revision": _git_revision(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# ---------------------------------------------------------------- resources


def _cpu_self_and_reaped() -> float:
    """CPU seconds of this process (all threads) plus every child it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _pss_bytes(pid: int) -> int | None:
    """Proportional set size: shared pages split among sharers (fork children share a lot)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


@dataclass
class Usage:
    """Resource use of the whole process tree during one monitored run."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_bytes: int = 0
    peak_pss_bytes: int = 0
    start_rss_bytes: int = 0
    peak_processes: int = 1


@dataclass
class TreeMonitor:
    """Polls this process and all its descendants for summed RSS/PSS; totals their CPU time.

    CPU time counts this process's threads, children reaped during the run (through
    RUSAGE_CHILDREN) and children still alive at the end (through psutil), so worker
    processes are neither missed nor counted twice. The polling thread's own CPU is excluded,
    but not its effect: it took ~0.35 s of CPU per 3 s loader run here (psutil's process
    walk, and the kernel's page walk behind smaps_rollup for PSS), and slowed a loader that
    saturates both cores by 8%. poll=False samples memory only at entry and exit.
    """

    interval_s: float = 0.05
    pss_every: int = 4
    poll: bool = True
    usage: Usage = field(default_factory=Usage)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _child_cpu_at_start: dict[int, float] = field(default_factory=dict)
    _direct_at_start: set[int] = field(default_factory=set)
    _poll_cpu_s: float = 0.0

    def _tree(self) -> list[psutil.Process]:
        me = psutil.Process()
        try:
            return [me, *me.children(recursive=True)]
        except psutil.Error:
            return [me]

    def _sample(self, with_pss: bool) -> None:
        rss = pss = 0
        procs = self._tree()
        for proc in procs:
            try:
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
            if with_pss:
                pss += _pss_bytes(proc.pid) or 0
        self.usage.peak_rss_bytes = max(self.usage.peak_rss_bytes, rss)
        self.usage.peak_pss_bytes = max(self.usage.peak_pss_bytes, pss)
        self.usage.peak_processes = max(self.usage.peak_processes, len(procs))

    def _poll(self) -> None:
        tick = 0
        while not self._stop.wait(self.interval_s):
            self._sample(with_pss=tick % self.pss_every == 0)
            tick += 1
        self._poll_cpu_s = time.thread_time()  # this thread's own CPU, taken out of the total

    def _live_children_cpu(self) -> dict[int, float]:
        cpu: dict[int, float] = {}
        for proc in self._tree()[1:]:
            try:
                t = proc.cpu_times()
                cpu[proc.pid] = t.user + t.system
            except psutil.Error:
                continue
        return cpu

    def __enter__(self) -> TreeMonitor:
        self._child_cpu_at_start = self._live_children_cpu()
        self._direct_at_start = {p.pid for p in psutil.Process().children(recursive=False)}
        self._cpu_start = _cpu_self_and_reaped()
        self._sample(with_pss=True)
        self.usage.start_rss_bytes = self.usage.peak_rss_bytes
        self._t0 = time.perf_counter()
        if self.poll:
            self._thread = threading.Thread(target=self._poll, name="bench-monitor", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.usage.wall_s = time.perf_counter() - self._t0
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample(with_pss=True)
        live = self._live_children_cpu()
        live_delta = sum(c - self._child_cpu_at_start.get(pid, 0.0) for pid, c in live.items())
        own = _cpu_self_and_reaped() - self._cpu_start - self._poll_cpu_s
        # A child alive at entry and reaped during the run (a previous row's DataLoader workers,
        # joined late by garbage collection) enters RUSAGE_CHILDREN with its whole lifetime:
        # its CPU from before the run is not this run's.
        before = sum(c for pid, c in self._child_cpu_at_start.items()
                     if pid in self._direct_at_start and pid not in live)
        self.usage.cpu_s = own + live_delta - before


# ---------------------------------------------------------------- runs


@dataclass
class RunResult:
    """One timed pass of one configuration, as a benchmark function reports it."""

    images: int  # images counted in the steady-state rate (after warm-up)
    seconds: float  # wall time of those images
    total_images: int  # every image produced in the pass, warm-up included (for CPU/img)
    first_batch_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0


def timed_iteration(
    make_iter: Callable[[], Iterable[Any]], count: Callable[[Any], int],
    images: int, warmup_batches: int, clock: Callable[[], float] = time.perf_counter,
) -> RunResult:
    """Iterate a fresh iterator until `images` are counted after `warmup_batches` batches.

    The clock for the rate starts when the last warm-up batch arrives; time to first batch
    runs from before the iterator is made to the first batch. `clock` is injectable so the
    bookkeeping can be tested without measuring real time.
    """
    t0 = clock()
    iterator = iter(make_iter())
    first_batch_s: float | None = None
    counted = total = 0
    t_start = t0
    for batches, batch in enumerate(iterator, start=1):
        now = clock()
        n = count(batch)
        total += n
        if first_batch_s is None:
            first_batch_s = now - t0
        if batches == warmup_batches:
            t_start = now
        elif batches > warmup_batches:
            counted += n
            if counted >= images:
                break
    elapsed = clock() - t_start
    close = getattr(iterator, "close", None) or getattr(iterator, "_shutdown_workers", None)
    del iterator
    if callable(close):
        close()
    return RunResult(counted, elapsed, total, first_batch_s)


def round_order(names: list[str], round_index: int) -> list[str]:
    """The rows' order in one round: as given first, then a permutation seeded by the round.

    A rotation would keep the cyclic order, so one row would always follow the same neighbour
    (a DataLoader's worker teardown, say) and inherit its after-effects in every round.
    """
    if round_index == 0:
        return list(names)
    order = list(names)
    random.Random(round_index).shuffle(order)
    return order


def run_interleaved(
    configs: dict[str, Callable[[], RunResult]], repeats: int,
    on_run: Callable[[str, int, RunResult, Usage], None] | None = None,
    on_pass: Callable[[str, str], None] | None = None,
) -> dict[str, list[tuple[RunResult, Usage]]]:
    """Run every configuration once per round, `repeats` rounds, each under a TreeMonitor.

    Interleaving spreads slow drifts of a shared machine (other jobs, thermal state)
    over all configurations instead of letting them land on one; the order within a round
    changes from round to round (round_order). An untimed warm-up pass (page cache, imports)
    comes first.
    Memory is polled only in a last, untimed pass: the poller's CPU would slow what the
    rounds time, and by then the process has its steady size, so every configuration's
    peak is measured from the same baseline. Each timed
    run's usage carries that pass's peaks; on_run sees the runs once it is done.
    on_pass(stage, name) is told of each untimed run ("warm-up" or "memory").
    """
    for name, fn in configs.items():
        if on_pass is not None:
            on_pass("warm-up", name)
        fn()
    timed: dict[str, list[tuple[RunResult, Usage]]] = {name: [] for name in configs}
    names = list(configs)
    for round_index in range(repeats):
        for name in round_order(names, round_index):
            with TreeMonitor(poll=False) as monitor:
                run = configs[name]()
            timed[name].append((run, monitor.usage))
    results: dict[str, list[tuple[RunResult, Usage]]] = {}
    for name, fn in configs.items():
        if on_pass is not None:
            on_pass("memory", name)
        with TreeMonitor() as monitor:
            fn()
        results[name] = [(run, _with_peaks(usage, monitor.usage)) for run, usage in timed[name]]
    if on_run is not None:
        for name, runs in results.items():
            for round_index, (run, usage) in enumerate(runs):
                on_run(name, round_index, run, usage)
    return results


def _with_peaks(usage: Usage, polled: Usage) -> Usage:
    """usage with its memory peaks raised to those the polled pass of its configuration saw."""
    return replace(
        usage,
        peak_rss_bytes=max(usage.peak_rss_bytes, polled.peak_rss_bytes),
        peak_pss_bytes=max(usage.peak_pss_bytes, polled.peak_pss_bytes),
        peak_processes=max(usage.peak_processes, polled.peak_processes),
    )


def summary_row(name: str, runs: Sequence[tuple[RunResult, Usage]]) -> dict[str, Any]:
    """Median and spread of the rate, peak memory, CPU per image and time to first batch."""
    rates = [r.rate for r, _ in runs]
    cpu_per_img = [u.cpu_s / max(r.total_images, 1) for r, u in runs]
    first = [r.first_batch_s for r, _ in runs if r.first_batch_s is not None]
    return {
        "kind": "summary",
        "name": name,
        "img_per_s": summarize(rates),
        "cpu_s_per_img": summarize(cpu_per_img),
        "peak_rss_mb": max(u.peak_rss_bytes for _, u in runs) / 2**20,
        "peak_pss_mb": max(u.peak_pss_bytes for _, u in runs) / 2**20,
        "processes": max(u.peak_processes for _, u in runs),
        "first_batch_s": summarize(first) if first else None,
        "images_per_run": runs[0][0].images,
    }


def run_row(name: str, round_index: int, run: RunResult, usage: Usage) -> dict[str, Any]:
    """One raw measurement as a JSON-lines record."""
    return {
        "kind": "run", "name": name, "round": round_index, "images": run.images,
        "seconds": run.seconds, "img_per_s": run.rate, "total_images": run.total_images,
        "first_batch_s": run.first_batch_s, "cpu_s": usage.cpu_s, "wall_s": usage.wall_s,
        "peak_rss_mb": usage.peak_rss_bytes / 2**20, "peak_pss_mb": usage.peak_pss_bytes / 2**20,
        "start_rss_mb": usage.start_rss_bytes / 2**20, "processes": usage.peak_processes,
        **run.extra,
    }


# ---------------------------------------------------------------- output


class JsonlWriter:
    """Appends one JSON object per line and flushes, so a killed run keeps what it measured."""

    def __init__(self, path: Path, benchmark: str) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w", encoding="utf-8")
        self.write({"kind": "env", "benchmark": benchmark, "argv": sys.argv, **environment()})

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSON-lines file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table, columns padded for the terminal."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    divider = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), divider, *(line(r) for r in rows)])


def env_line(env: dict[str, Any]) -> str:
    """One line summarizing the environment under a printed table."""
    return (
        f"{env['cpu_model']}, {env['cpu_affinity']} usable cores, load {env['load_avg_1m']}, "
        f"python {env['python']}, torch {env['torch']}, pillow {env['pillow']} "
        f"(libjpeg-turbo {env['pillow_libjpeg_turbo']}), fastloader native="
        f"{env['fastloader_native']}, git {env['git_revision']}"
    )


def best_dataloader(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The DataLoader row with the highest median rate (None without one)."""
    candidates = [r for r in rows if r["name"].startswith("DataLoader")]
    return max(candidates, key=lambda r: r["img_per_s"]["median"], default=None)


def paired_speedups(results: dict[str, list[Any]], baseline: str) -> dict[str, dict[str, float]]:
    """Per row, the spread of its rate over the baseline's rate in the same round.

    Rows of one round run back to back, so a round's ratio shares that round's machine load;
    on a shared machine whose speed drifts, the median of these paired ratios moves less than
    the ratio of the two medians does.
    """
    base = [run.rate for run, _ in results[baseline]]
    return {
        name: summarize([run.rate / b for (run, _), b in zip(runs, base, strict=True) if b > 0])
        for name, runs in results.items()
    }


def gil_kept(call: Callable[[], Any]) -> float:
    """How much of its solo rate a spinning Python thread keeps while call() runs: near 1 when
    the call releases the GIL, near 0 when it holds it (the GIL probes of the benchmarks)."""

    def spin_rate(inner: Callable[[], Any] | None) -> float:
        stop, count = threading.Event(), [0]

        def spin() -> None:
            while not stop.is_set():
                count[0] += 1

        thread = threading.Thread(target=spin)
        thread.start()
        time.sleep(0.02)  # the spinner is running
        before, start = count[0], time.perf_counter()
        inner() if inner is not None else time.sleep(0.2)
        after, seconds = count[0], time.perf_counter() - start
        stop.set()
        thread.join()
        return (after - before) / seconds

    return spin_rate(call) / spin_rate(None)
