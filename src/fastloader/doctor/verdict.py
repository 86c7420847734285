"""The doctor's verdict: a pure function of measured loader stats and machine facts.

Inputs are plain dicts so tests can feed synthetic slow stages.

stats (times in ms per batch unless said otherwise; stage keys are optional, a plain
DataLoader has none):
    batches, batch_size, batch_ms (consumer wall time per batch, simulated step included),
    simulated_step_ms (time.sleep per batch standing in for a training step; 0 when none),
    wait_ms_median, wait_ms_p90 (one next() call), wait_fraction (of the consumer's wall),
    read_ms, plan_ms (a helper thread: it reads and plans batch b+1 while batch b decodes, so
    these overlap decode_ms), decode_ms (producer thread; on a CPU device it includes the NCHW
    layout + normalize), copy_ms (consumer thread: H2D + normalize; on a CPU device only the
    hand-over),
    wait_ms (consumer's mean wait for a batch, from the loader's counters),
    slot_wait_fraction (share of the producer's wall blocked on a full ring),
    batches_per_pass (a short pass restarts the producer often),
    num_threads, prefetch, source_pixels (mean h*w of stored images), output_pixels.
    With remote workers (remote=): remote_workers (live), remote_ms (a worker's busy ms a
    batch), remote_busy_share (mean share of the wall a worker was busy), remote_wait_share
    (share of the wall the producer waited for workers' batches), local_batches_per_s (the
    trainer's own decode).
machine: cores, cpu_percent (list, one per core, over the run), cuda (bool), dali (bool).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, TypedDict

STARVING_WAIT = 0.05  # the step waits > 5% of its wall time for batches: the loader starves it
IDLE_CORE_PERCENT = 50.0  # a core under this was mostly idle during the run
BUSY_MEAN_PERCENT = 85.0  # all cores above this on average: the CPU itself is the limit
MAX_SIDE_KEEPS = 0.7  # advise --max-side when it would leave under 70% of the stored pixels
SPARE_PRODUCER = 0.8  # a producer busy under 80% of the batch time could have run further ahead
SHORT_PASS = 20  # passes of fewer batches restart the producer often: each first batch waits
COPY_SHARE = 0.25  # copy/normalize above 25% of the loader's time per batch is worth a tip
BURSTY_RATIO = 3.0  # p90 wait above 3x the median: waits come in bursts
BUSY_WORKERS = 0.8  # remote workers busy over 80% of the wall are saturated


# A run's figures by name (profile.timing_stats, doctor's stage rows): numbers, and a few
# settings as text (backend, device, autotune_state); read with float() where counted.
Stats: TypeAlias = Mapping[str, float | str]


class Machine(TypedDict):
    """The machine's facts beside a run's stats (profile.machine_facts)."""

    cores: int  # the cores this process may use
    cpu_percent: list[float]  # per core, over the run
    cuda: bool
    dali: bool


@dataclass(frozen=True)
class Verdict:
    """Whether the loader feeds the step, what limits it, and what to change."""

    feeds: bool | None  # None when no step length was given
    loader_ms: float  # the loader's own time per batch, as the consumer sees it
    step_ms: float | None
    bottleneck: str  # none, step, decode, read, plan, copy, loader, remote
    headline: str
    advice: tuple[str, ...]

    def lines(self) -> list[str]:
        return [f"VERDICT: {self.headline}", *(f"  - {tip}" for tip in self.advice)]


def loader_ms_per_batch(stats: Stats) -> float:
    """Consumer time per batch not spent in the (simulated) step: waits plus copy."""
    return max(0.0, float(stats["batch_ms"]) - float(stats.get("simulated_step_ms", 0.0)))


def _feeds(stats: Stats, step_ms: float | None, loader_ms: float) -> bool | None:
    if float(stats.get("simulated_step_ms", 0.0)) > 0:
        return float(stats.get("wait_fraction", 0.0)) <= STARVING_WAIT
    if step_ms is None:
        return None
    return loader_ms <= step_ms


def _stage_ms(stats: Stats) -> dict[str, float]:
    return {name: float(stats[f"{name}_ms"]) for name in ("read", "plan", "decode", "copy")
            if f"{name}_ms" in stats}


def remote_limits(stats: Stats) -> bool:
    """Whether remote workers are the limit: busy nearly all the time, and the producer
    waited for their batches."""
    return (float(stats.get("remote_workers", 0)) > 0
            and float(stats.get("remote_busy_share", 0.0)) >= BUSY_WORKERS
            and float(stats.get("remote_wait_share", 0.0)) > STARVING_WAIT)


def workers_needed(stats: Stats, step_ms: float) -> int:
    """Remote workers that would make a batch every step_ms beside the trainer's own decode."""
    local_per_ms = float(stats.get("local_batches_per_s", 0.0)) / 1000.0
    short = max(0.0, 1.0 / step_ms - local_per_ms)  # batches a ms the workers must give
    return max(1, math.ceil(short * float(stats["remote_ms"])))


def _bottleneck(stats: Stats, feeds: bool | None) -> str:
    stages = _stage_ms(stats)
    if feeds and float(stats.get("slot_wait_fraction", 0.0)) > 0.5:
        return "step"  # the producer sat blocked on a full ring: the step sets the pace
    if feeds:
        return "none"
    if remote_limits(stats):
        return "remote"
    if not stages:
        return "loader"
    producer = producer_busy_ms(stats)
    copy = stages.get("copy", 0.0)
    if copy > producer:
        return "copy"
    if float(stats.get("simulated_step_ms", 0.0)) > 0 and "wait_ms" in stats:
        if copy >= float(stats["wait_ms"]):
            return "copy"  # the step lost more time converting batches than waiting for them
        if producer < SPARE_PRODUCER * float(stats["batch_ms"]):
            return "prefetch"  # the producer had time to spare, yet the step waited: bursts
    helper = stages.get("read", 0.0) + stages.get("plan", 0.0)
    if helper > stages.get("decode", 0.0):  # the helper's read-ahead sets the pace
        return max(("read", "plan"), key=lambda name: stages.get(name, 0.0))
    return "decode"


def producer_busy_ms(stats: Stats) -> float:
    """The producer's busy time per batch: decode, or the helper's read + plan when longer.

    The helper reads and plans batch b+1 while batch b decodes, so the two overlap; adding
    them would count the overlapped time twice.
    """
    helper = sum(float(stats.get(f"{name}_ms", 0.0)) for name in ("read", "plan"))
    return max(float(stats.get("decode_ms", 0.0)), helper)


def _headline(verdict_feeds: bool | None, bottleneck: str, loader_ms: float,
              step_ms: float | None, stats: Stats) -> str:
    rate = 1000.0 / loader_ms if loader_ms > 0 else math.inf
    if bottleneck in ("none", "step"):
        if step_ms:
            spare = 100.0 * (1.0 - loader_ms / step_ms)
            return (f"the loader is not the bottleneck: it needs {loader_ms:.1f} ms of a "
                    f"{step_ms:.0f} ms step ({spare:.0f}% to spare)")
        return "the loader is not the bottleneck: the step never waited for a batch"
    if verdict_feeds is None:
        return (f"the loader delivers a batch every {loader_ms:.1f} ms (at most {rate:.1f} "
                f"steps/s); bottleneck: {bottleneck}. Pass --step-ms to check your step")
    waited = float(stats.get("wait_fraction", 0.0)) * 100.0
    if float(stats.get("simulated_step_ms", 0.0)) > 0:
        return (f"the loader STARVES the step: next() took {waited:.0f}% of the time; "
                f"bottleneck: {bottleneck}")
    return (f"the loader CANNOT feed a {step_ms:.0f} ms step: it needs {loader_ms:.1f} ms "
            f"per batch; bottleneck: {bottleneck}")


def _cpu_advice(stats: Stats, machine: Machine) -> list[str]:
    cores = int(machine.get("cores", 1))
    percent: Sequence[float] = machine.get("cpu_percent") or []
    threads = int(stats.get("num_threads", cores))
    mean = sum(percent) / len(percent) if percent else 0.0
    idle = [p for p in percent if p < IDLE_CORE_PERCENT]
    if percent and mean >= BUSY_MEAN_PERCENT:
        return [f"all {len(percent)} cores were busy (mean {mean:.0f}%): the CPU is the limit; "
                "more threads will not help, fewer decoded pixels will"]
    if threads < cores and (idle or not percent):
        return [f"raise num_threads from {threads} to {cores} (or 'auto'): "
                f"{len(idle)} of {len(percent)} cores were mostly idle"]
    if idle:
        return [f"{len(idle)} cores were mostly idle with {threads} threads: the producer "
                "thread's hand-offs, the read-ahead helper's serial work (read, plan) or I/O "
                "holds decoding back"]
    return []


def _decode_advice(stats: Stats, machine: Machine) -> list[str]:
    advice = _cpu_advice(stats, machine)
    source = float(stats.get("source_pixels", 0.0))
    output = float(stats.get("output_pixels", 0.0))
    side = 2 * round(math.sqrt(output))  # twice the output side keeps crops sharp
    long_side = math.sqrt(source * 4 / 3)  # a 4:3 image's longer side
    keeps = (side / long_side) ** 2 if long_side > 0 else 1.0
    if output > 0 and keeps < MAX_SIDE_KEEPS:
        advice.append(f"stored images average {source / 1e6:.2f} MP for a "
                      f"{output / 1e6:.3f} MP output: repack with `packdata --max-side "
                      f"{side}` to decode about {100 * (1 - keeps):.0f}% fewer pixels")
    if machine.get("cuda"):
        advice.append("this box has a GPU: backend='dali' decodes on it (nvJPEG)"
                      + ("" if machine.get("dali") else "; pip install nvidia-dali-cuda120"))
    return advice


def _remote_advice(stats: Stats, step_ms: float | None) -> list[str]:
    workers = int(float(stats["remote_workers"]))
    said = (f"the {workers} remote workers are the limit: each was busy "
            f"{100 * float(stats['remote_busy_share']):.0f}% of the time ("
            f"{float(stats['remote_ms']):.1f} ms a batch) and the producer waited for their "
            f"batches {100 * float(stats['remote_wait_share']):.0f}% of it")
    if not step_ms:
        return [f"{said}; each more worker adds about "
                f"{1000.0 / max(float(stats['remote_ms']), 1e-9):.1f} batches/s"]
    needed = workers_needed(stats, step_ms)
    more = max(1, needed - workers)
    return [f"{said}; about {more} more (Remote(workers={workers + more})) would feed a "
            f"{step_ms:.0f} ms step"]


def _stage_advice(bottleneck: str, stats: Stats,
                  machine: Machine, step_ms: float | None = None) -> list[str]:
    stages = _stage_ms(stats)
    if bottleneck == "remote":
        return _remote_advice(stats, step_ms)
    if bottleneck == "decode":
        return _decode_advice(stats, machine)
    if bottleneck == "read":
        return [f"reading records takes {stages['read']:.1f} ms per batch: the storage is "
                "slow; put the dataset on a local SSD or in RAM (page cache)"]
    if bottleneck == "plan":
        return [f"planning crops takes {stages['plan']:.1f} ms per batch: per-batch "
                "overhead; a larger batch_size spreads it over more images"]
    if bottleneck == "copy":
        return [f"copy/normalize on the consumer takes {stages['copy']:.1f} ms per batch: "
                "run it on the GPU (device='cuda'), or take uint8 (normalize=None) and "
                "normalize inside the model"]
    if bottleneck == "prefetch":
        return [f"the producer was busy only {100 * _producer_share(stats):.0f}% of the time "
                f"yet the step waited (median {stats.get('wait_ms_median', 0.0):.1f} ms, p90 "
                f"{stats.get('wait_ms_p90', 0.0):.1f} ms): waits come in bursts; raise "
                f"prefetch (now {stats.get('prefetch', '?')}) or pass prefetch='auto'"]
    if bottleneck == "loader":
        advice = ["a plain DataLoader gives no stage counters: try FastLoader over a packed "
                  "dataset (`packdata images/ out.lmdb`), then `fastloader doctor out.lmdb`"]
        percent = machine.get("cpu_percent") or []
        if percent and min(percent) < IDLE_CORE_PERCENT:
            advice.insert(0, "cores were idle: raise num_workers (one per core) and keep "
                             "persistent_workers=True")
        return advice
    return []


def _producer_share(stats: Stats) -> float:
    batch_ms = float(stats["batch_ms"])
    return producer_busy_ms(stats) / batch_ms if batch_ms > 0 else 0.0


def _general_advice(stats: Stats, step_ms: float | None, loader_ms: float,
                    skip: str) -> list[str]:
    advice = []
    median, p90 = float(stats.get("wait_ms_median", 0.0)), float(stats.get("wait_ms_p90", 0.0))
    bursty = p90 > BURSTY_RATIO * max(median, 1.0)
    if bursty and skip != "prefetch" and float(stats.get("wait_fraction", 0.0)) > 0.01:
        deeper = (f"a deeper prefetch (now {stats['prefetch']}, or 'auto')" if "prefetch" in stats
                  else "more prefetch_factor (or num_workers)")
        advice.append(f"waits are bursty (p90 {p90:.1f} ms vs median {median:.1f} ms): "
                      f"{deeper} smooths them")
    per_pass = int(stats.get("batches_per_pass", SHORT_PASS))
    if per_pass < SHORT_PASS:
        advice.append(f"a pass has only {per_pass} batches: each pass starts the producer "
                      "afresh and its first batch waits; on a dataset this small the numbers "
                      "are pessimistic")
    copy = float(stats.get("copy_ms", 0.0))
    if loader_ms > 0 and copy > COPY_SHARE * loader_ms and "copy" not in skip:
        advice.append(f"copy/normalize also takes {copy:.1f} ms per batch on the consumer "
                      "thread, competing with decoding for the CPU: device='cuda' moves it "
                      "to the GPU; normalize=None hands out uint8")
    batch = int(stats.get("batch_size", 0))
    if step_ms and batch and loader_ms > step_ms:
        fits = int(step_ms / (loader_ms / batch))
        advice.append(f"at this speed a {step_ms:.0f} ms step can be fed about {fits} images "
                      f"per batch (now {batch})")
    return advice


def diagnose(stats: Stats, machine: Machine,
             step_ms: float | None = None) -> Verdict:
    """Decide whether the loader feeds a step of `step_ms`, name the bottleneck, advise."""
    loader_ms = loader_ms_per_batch(stats)
    feeds = _feeds(stats, step_ms, loader_ms)
    bottleneck = _bottleneck(stats, feeds)
    headline = _headline(feeds, bottleneck, loader_ms, step_ms, stats)
    advice: list[str] = []
    if bottleneck not in ("none", "step"):
        advice = _stage_advice(bottleneck, stats, machine, step_ms)
        advice += _general_advice(stats, step_ms, loader_ms, skip=bottleneck)
    elif bottleneck == "step":
        advice = ["the producer waited on a full ring most of the time: speed up the "
                  "training step itself; fewer loader threads would leave it more cores"]
    return Verdict(feeds, loader_ms, step_ms, bottleneck, headline, tuple(advice))
