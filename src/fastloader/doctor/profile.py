"""Time each next() of any iterable loader (a torch DataLoader included) and judge the wait."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import psutil
import torch

from fastloader.doctor.verdict import Machine, Verdict, diagnose
from fastloader.errors import invalid_argument, invalid_type
from fastloader.loader.order.sampler import usable_cores
from fastloader.loader.pipeline.stats import batch_size_of

T = TypeVar("T")


@dataclass
class Timing:
    """What the timing loop saw after its warm-up batches (seconds)."""

    waits: list[float] = field(default_factory=list)  # one next() call each
    images: int = 0
    largest: int = 0  # the largest batch seen: the batch size (a pass's last may be short)
    wall_s: float = 0.0
    step_s: float = 0.0  # total simulated step time (time.sleep, as measured)
    warmup_s: float = 0.0

    @property
    def batches(self) -> int:
        return len(self.waits)


def _epochs(loader: Iterable[T]) -> Generator[T, None, None]:
    """Batches across passes; a one-shot iterator (or an empty loader) stops at its end."""
    while True:
        iterator = iter(loader)
        produced = False
        try:
            for batch in iterator:
                produced = True
                yield batch
        finally:
            close = getattr(iterator, "close", None)
            if iterator is not loader and callable(close):
                close()  # a FastLoader pass stops its producer here, not at collection
        if iterator is loader or not produced:  # a one-shot iterator ran out: stop
            return


def time_batches(loader: Iterable[object], *, steps: int | None = None,
                 seconds: float | None = None, step_ms: float | None = None,
                 warmup: int = 1, warm_until: Callable[[], bool] | None = None,
                 warmup_s: float = 0.0, on_start: Callable[[], None] | None = None) -> Timing:
    """Take batches until `steps` were timed or `seconds` passed, sleeping step_ms after each.

    The first `warmup` batches (worker start-up) are taken but not timed, and more while
    `warm_until()` is false, for at most `warmup_s` seconds (the doctor waits for autotune to
    settle). `on_start()` runs when timing starts. A batch's wait is its next() call's time.
    """
    timing = Timing()
    sleep_s = (step_ms or 0.0) / 1000.0
    stream = _epochs(loader)
    began = time.perf_counter()
    taken = 0
    while taken < warmup or (warm_until is not None and not warm_until()
                             and time.perf_counter() - began < warmup_s):
        if next(stream, None) is None:
            return timing
        taken += 1
    timing.warmup_s = time.perf_counter() - began
    if on_start is not None:
        on_start()
    started = time.perf_counter()
    while steps is None or timing.batches < steps:
        asked = time.perf_counter()
        batch = next(stream, None)
        if batch is None:
            break
        timing.waits.append(time.perf_counter() - asked)
        size = batch_size_of(batch)
        timing.images += size
        timing.largest = max(timing.largest, size)
        if sleep_s:
            slept = time.perf_counter()
            time.sleep(sleep_s)
            timing.step_s += time.perf_counter() - slept  # as slept: sleep overshoots under load
        if seconds is not None and time.perf_counter() - started >= seconds:
            break
    timing.wall_s = time.perf_counter() - started
    stream.close()  # ends the loader's current pass now
    return timing


def timing_stats(timing: Timing, step_ms: float | None) -> dict[str, float | str]:
    """The verdict's stats dict from a Timing (no stage counters)."""
    waits_ms = [w * 1000.0 for w in timing.waits]
    batches = max(timing.batches, 1)
    return {
        "batches": timing.batches,
        "batch_size": timing.largest,
        "images": timing.images,
        "batch_ms": timing.wall_s * 1000.0 / batches,
        "simulated_step_ms": float(step_ms or 0.0),
        "wait_ms_median": statistics.median(waits_ms) if waits_ms else 0.0,
        "wait_ms_p90": float(np.percentile(waits_ms, 90)) if waits_ms else 0.0,
        "wait_fraction": sum(timing.waits) / timing.wall_s if timing.wall_s > 0 else 0.0,
        "images_per_s": timing.images / timing.wall_s if timing.wall_s > 0 else 0.0,
    }


def machine_facts(cpu_percent: list[float]) -> Machine:
    """Cores this process may use, per-core CPU use over the run, GPU and DALI presence."""
    cores = usable_cores()
    try:
        import importlib.util

        dali = importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):
        dali = False
    return {"cores": cores or 1, "cpu_percent": cpu_percent,
            "cuda": torch.cuda.is_available(), "dali": dali}


@dataclass(frozen=True)
class ProfileReport:
    """profile()'s result: per-next() waits, throughput, the share spent waiting, a verdict."""

    stats: dict[str, float | str]
    machine: Machine
    verdict: Verdict

    def lines(self) -> list[str]:
        s = self.stats
        step = s["simulated_step_ms"]
        return [
            f"{s['batches']} batches of {s['batch_size']}"
            + (f" with a simulated {step:.0f} ms step" if step else " (no step simulated)"),
            f"next() per batch: median {s['wait_ms_median']:.2f} ms, "
            f"p90 {s['wait_ms_p90']:.2f} ms",
            f"throughput: {s['images_per_s']:.1f} images/s; waiting "
            f"{100 * s['wait_fraction']:.1f}% of the time",
            *self.verdict.lines(),
        ]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def profile(dataloader: Iterable[object], steps: int = 50, step_ms: float | None = None,
            warmup: int = 1) -> ProfileReport:
    """Time steps next() calls of any loader and say whether it starves a step of step_ms.

    With step_ms, each batch is followed by time.sleep(step_ms) (a stand-in for a GPU step that
    leaves the CPU free), and the verdict says whether the step waited for data. The first
    warmup batches (worker start-up) are not timed.

    Args:
        dataloader: any iterable of batches (a FastLoader, a torch DataLoader, a list).
        steps: batches to time, >= 1; a short loader is iterated again.
        step_ms: the training step to simulate, in milliseconds; None for none.
        warmup: batches taken before timing starts.

    Returns:
        ProfileReport: the stage times, the machine's state and a verdict; print it.

    Raises:
        InvalidArgumentError: steps < 1 or step_ms < 0.
        InvalidTypeError: dataloader is not iterable.
    """
    if not isinstance(dataloader, Iterable):
        raise invalid_type("dataloader", dataloader, "an iterable such as a DataLoader")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise invalid_argument("steps", steps, "must be an int >= 1", "Pass e.g. steps=50.")
    if step_ms is not None and (not isinstance(step_ms, (int, float)) or step_ms < 0):
        raise invalid_argument("step_ms", step_ms, "must be a number >= 0 (milliseconds)",
                               "Pass your training step's length, e.g. step_ms=120.")
    psutil.cpu_percent(percpu=True)  # starts psutil's interval
    timing = time_batches(dataloader, steps=steps, step_ms=step_ms, warmup=warmup)
    machine = machine_facts(list(psutil.cpu_percent(percpu=True)))
    stats = timing_stats(timing, step_ms)
    return ProfileReport(stats, machine, diagnose(stats, machine, step_ms or None))
