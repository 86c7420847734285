"""The Ray engine: one Ray task per pending shard (retried by Ray when its worker dies), with
the listing done once on the driver and the progress counted there.

Every source's tasks (build.run_shard) read the plan from the staging (an importer's reopen
its source from it); Python samples go to the tasks by ray.put (they must pickle).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import signal
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

from fastloader.errors import FastloaderError, PackError
from fastloader.pack.engines.progress import Meter
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.staging.build import run_shard
from fastloader.pack.staging.part import Stage

RAY_HINT = ('engine=\'ray\' needs Ray: pip install "fastloader[ray]" (or "ray>=2.9"); or pack '
            "with engine='local'.")


def import_ray() -> ModuleType:
    """The ray module, or PackError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise PackError(RAY_HINT) from None
    return ray


def _ray_failure(ray: ModuleType, exc: Exception, k: int) -> FastloaderError:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, FastloaderError):  # a bad item (no --skip-bad): the task's own error
        return cause
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, OSError):
        return PackError(f"shard {k}'s task failed: {cause}; fix it and rerun with resume=True.")
    return PackError(f"shard {k}'s Ray task failed ({type(exc).__name__}: {exc}); the finished "
                     "parts are kept: rerun with resume=True.")


def run_ray(staging: Stage, todo: Sequence[int], workers: int, address: str | None,
            meter: Meter, task: Callable[..., dict[str, int]] | None = None,
            extra: tuple[object, ...] = ()) -> set[int]:
    """Run task(staging, k, *extra) (build.run_shard unless given) as one Ray task per
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


@contextlib.contextmanager
def joined_ray(workers: int, address: str | None) -> Iterator[ModuleType]:
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


def run_on_ray(staging: Stage, todo: Sequence[int], items: ItemSource, workers: int,
               address: str | None, meter: Meter) -> set[int]:
    """One Ray task per pending shard of any source: the task opens the source from the plan
    (a tree's listing, an importer's description), or is handed the samples by ray.put."""
    samples = items.handed()
    if samples is None:
        return run_ray(staging, todo, workers, address, meter)
    with joined_ray(workers, address) as ray:  # ray.put needs the instance now
        try:
            shared = ray.put(samples)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise PackError(f"engine='ray' sends Python samples to its tasks pickled, and "
                            f"{type(samples).__name__} does not pickle ({exc}); make it "
                            "picklable or pack with engine='local'.") from None
        return run_ray(staging, todo, workers, address, meter, extra=(shared,))
