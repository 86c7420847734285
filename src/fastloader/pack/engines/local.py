"""Who runs the shard tasks of a plan: this machine's processes, or a Ray cluster.

Both write the same parts (part.py): the local engine prepares the files of every pending
shard in listing order on a process pool (so even one shard uses every core) and writes each
part when its last file is in; the Ray engine runs part.run_shard(staging, k) as one Ray task
per shard (retried by Ray when its worker dies), with the listing done once on the driver.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from fastloader.errors import FastloaderError, PackError
from fastloader.pack.sources.validate import Prepared
from fastloader.pack.staging.part import Stage, build_part, prepare_job, run_shard
from fastloader.pack.staging.plan import ShardPlan, Spans

log = logging.getLogger(__name__)
ENGINES = ("local", "ray")
_WINDOW_BYTES = 64 << 20  # source bytes in flight per pool window: bounds memory
_WINDOW_FILES = 2048
RAY_HINT = ('--engine ray needs Ray: pip install "fastloader[ray]" (or "ray>=2.9"); or pack '
            "with --engine local.")

Progress = Callable[[int, int, int], None]  # (files done, files total, source bytes done)


def progress_bar(total: int, quiet: bool, initial: int = 0) -> Any:
    """tqdm's bar on a terminal's stderr, else None."""
    if quiet or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="file", unit_scale=True, file=sys.stderr,
                smoothing=0.1, desc="packing", dynamic_ncols=True)


class Meter:
    """Counts files and bytes done for the progress callback and the bar."""

    def __init__(self, plan: Spans, todo: Sequence[int], progress: Progress | None,
                 quiet: bool) -> None:
        pending = sum(plan.span(k)[1] - plan.span(k)[0] for k in todo)
        pending_bytes = sum(int(plan.sizes[slice(*plan.span(k))].sum()) for k in todo)
        self.total, self.progress = len(plan), progress
        self.files = self.total - pending
        self.bytes = int(plan.sizes.sum()) - pending_bytes
        self.began = time.monotonic()
        self.bar = progress_bar(self.total, quiet, self.files)

    def add(self, files: int, nbytes: int) -> None:
        self.files += files
        self.bytes += nbytes
        if self.progress is not None:
            self.progress(self.files, self.total, self.bytes)
        if self.bar is not None:
            self.bar.update(files)
            rate = self.bytes / max(time.monotonic() - self.began, 1e-9) / 1e6
            self.bar.set_postfix_str(f"{rate:.1f} MB/s", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _windows(plan: ShardPlan, positions: Iterable[int]) -> Iterator[list[int]]:
    window: list[int] = []
    size = 0
    for i in positions:
        window.append(i)
        size += int(plan.sizes[i])
        if size >= _WINDOW_BYTES or len(window) >= _WINDOW_FILES:
            yield window
            window, size = [], 0
    if window:
        yield window


def _prepared(plan: ShardPlan, todo: Sequence[int], workers: int,
              job: Callable[[str], Prepared]) -> Iterator[Prepared]:
    """The pending shards' files prepared in listing order, by a pool holding two windows."""
    positions = (i for k in todo for i in range(*plan.span(k)))
    count = sum(plan.span(k)[1] - plan.span(k)[0] for k in todo)
    if workers == 1 or count < 4 * workers:
        yield from (job(plan.source(i)) for i in positions)
        return
    import multiprocessing

    with multiprocessing.Pool(workers, initializer=default_sigterm) as pool:
        pending: deque[Iterable[Prepared]] = deque()
        for window in _windows(plan, positions):
            chunk = max(1, min(32, len(window) // (4 * workers)))
            paths = [plan.source(i) for i in window]
            pending.append(pool.imap(job, paths, chunk))
            if len(pending) > 1:  # keep the next window decoding while this one drains
                yield from pending.popleft()
        while pending:
            yield from pending.popleft()


def run_local(staging: Stage, plan: ShardPlan, todo: Sequence[int], settings: dict[str, Any],
              workers: int, meter: Meter) -> set[int]:
    """Write the parts of `todo` with this machine's processes; the shards written."""
    stream = _prepared(plan, todo, workers, prepare_job(settings))

    def counted(lo: int, hi: int) -> Iterator[Prepared]:
        for i in range(lo, hi):
            record = next(stream)
            yield record
            meter.add(1, int(plan.sizes[i]))

    written: set[int] = set()
    for k in todo:
        build_part(staging, plan, k, settings, counted(*plan.span(k)))
        written.add(k)
    return written


def import_ray() -> Any:
    """The ray module, or PackError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise PackError(RAY_HINT) from None
    return ray


def _ray_failure(ray: Any, exc: Exception, k: int) -> FastloaderError:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, FastloaderError):  # a bad file under --strict: the task's own error
        return cause
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, OSError):
        return PackError(f"shard {k}'s task failed: {cause}; fix it and rerun with --resume.")
    return PackError(f"shard {k}'s Ray task failed ({type(exc).__name__}: {exc}); the finished "
                     "parts are kept: rerun with --resume.")


def run_ray(staging: Stage, todo: Sequence[int], workers: int, address: str | None,
            meter: Meter, task: Callable[..., dict[str, int]] | None = None,
            extra: tuple[Any, ...] = ()) -> set[int]:
    """Run task(staging, k, *extra) (part.run_shard, or a sample pack's) as one Ray task per
    pending shard; progress here on the driver.

    Uses the Ray instance this process already joined, else joins `address`, else starts a
    local one with `workers` CPUs on loopback (shut down again at the end).
    """
    with joined_ray(workers, address) as ray:
        # SPREAD: shards go to every node (their reads and writes are what a cluster adds),
        # not to the workers of the first node that has free CPUs
        remote = ray.remote(num_cpus=1, max_retries=3, scheduling_strategy="SPREAD")(
            run_shard if task is None else task)
        refs = {remote.remote(staging, k, *extra): k for k in todo}
        pending = list(refs)
        written: set[int] = set()
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    done = ray.get(ref)
                except Exception as exc:  # a task's error or a lost worker past its retries
                    for other in pending:
                        ray.cancel(other)
                    raise _ray_failure(ray, exc, refs[ref]) from None
                written.add(refs[ref])
                meter.add(done["files"], done["bytes"])
        return written


def default_sigterm() -> None:
    """A pool worker's initializer: SIGTERM kills it again. A forked worker inherits its
    parent's Python handler (ray.init installs one and leaves it after shutdown), and Pool's
    terminate() would then run that handler, not end the worker, and wait on it forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def joined_ray(workers: int, address: str | None) -> Iterator[Any]:
    """The ray module, joined to the instance this process already joined, else to `address`,
    else to a new local one with `workers` CPUs on loopback; what it started it shuts down."""
    ray = import_ray()
    started = not ray.is_initialized()
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init replaces it for good
    quiet = {"include_dashboard": False, "log_to_driver": False,
             "logging_level": logging.WARNING}  # packdata prints its own progress
    if started and address:
        ray.init(address=address, **quiet)
    elif started:  # "local": a new instance even if a cluster runs on this machine
        ray.init(address="local", num_cpus=workers, _node_ip_address="127.0.0.1", **quiet)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
            signal.signal(signal.SIGTERM, sigterm)


def pending_shards(staging: Path, plan: Spans, resume: bool) -> list[int]:
    """The shards whose part is missing or invalid (all of them unless resuming)."""
    if not resume:
        return list(range(plan.num_shards))
    from fastloader.pack.staging.part import check_part

    return [k for k in range(plan.num_shards) if check_part(staging, plan, k)[0] is None]


__all__ = ["ENGINES", "Meter", "default_sigterm", "import_ray",
           "joined_ray", "pending_shards", "run_local", "run_ray"]
