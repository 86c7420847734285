"""A loader's remote workers on Ray: Ray joined (or a local instance started on 127.0.0.1), the
actors placed by resources, their joining and loss tracked, and every actor killed by close().

Actors are the loader's own (not detached): Ray also ends them when the trainer's process ends,
however it ends. A local Ray this pool started is shut down with it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from fastloader.errors import FastloaderError, OptionalDependencyError
from fastloader.loader.pipeline.stats import WorkerStats
from fastloader.loader.remote.options import Remote
from fastloader.loader.remote.worker import BatchWork, BatchWorker

log = logging.getLogger(__name__)

RAY_HINT = ('remote= needs Ray: pip install "fastloader[ray]" (or "ray>=2.9"); or drop remote= '
            "to decode on this machine only.")


def import_ray() -> ModuleType:
    """The ray module, or OptionalDependencyError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise OptionalDependencyError(RAY_HINT) from None
    return ray


def lost_errors(ray: ModuleType) -> tuple[type[BaseException], ...]:
    """The errors that say a worker (its process or its node) is gone, not that a batch failed."""
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
             "NodeDiedError", "ObjectLostError", "OwnerDiedError", "ObjectFetchTimedOutError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


# Pools of this process using the local Ray fastloader started: a train and a validation
# loader share it, and the last to close shuts it down (not the first, under the other's actors).
_local_users = 0
_local_lock = threading.Lock()


def join_ray(ray: ModuleType, options: Remote) -> bool:
    """Join the Ray instance options.address names (see Remote); True when the pool uses the
    local instance fastloader started in this process, which leave_ray shuts down with its last
    user. That instance has the machine's CPUs (or the workers' CPUs, if more), so the loaders
    of one process each place their workers on it."""
    global _local_users
    local = options.address in (None, "local")
    with _local_lock:
        if ray.is_initialized():
            if local and _local_users:
                _local_users += 1
                return True
            return False
        sigterm = signal.getsignal(signal.SIGTERM)  # ray.init replaces it for good
        quiet: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                 "logging_level": logging.WARNING}
        try:
            if local:
                ray.init(address="local", num_cpus=max(os.cpu_count() or 1, math.ceil(
                    options.workers * options.num_cpus)), _node_ip_address="127.0.0.1",
                    resources=dict(options.resources) or None, **quiet)
                _local_users = 1
                return True
            ray.init(address=options.address, **quiet)
            return False
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise FastloaderError(
                f"remote=Remote(address={options.address!r}) could not join Ray: {exc}. Start "
                "the cluster (`ray start --head`) or pass address=None for a local one."
            ) from exc
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, sigterm)


def leave_ray(ray: ModuleType) -> None:
    """A pool that joined the local Ray fastloader started is done with it: shut down with its
    last user."""
    global _local_users
    with _local_lock:
        _local_users = max(0, _local_users - 1)
        if _local_users == 0 and ray.is_initialized():
            with contextlib.suppress(Exception):
                ray.shutdown()


@dataclass(eq=False)
class Worker:
    """One actor and its counters, as the trainer sees it."""

    number: int
    actor: Any
    started: Any  # the ObjectRef of its ready() call
    state: str = "starting"  # "live" once ready() answered, "lost" for good
    node: str = ""
    pid: int = 0  # its process on that node
    batches: int = 0
    decode_s: float = 0.0
    nbytes: int = 0
    wait_s: float = 0.0
    redone: int = 0
    taken_back: int = 0
    pending: list[int] = field(default_factory=list)  # batches sent, not back: in run order
    running_since: float | None = None  # when it began pending[0], as near as the trainer knows
    batch_s: float | None = None  # its seconds a batch, smoothed (schedule.smoothed)

    def snapshot(self) -> WorkerStats:
        name = "local" if self.number < 0 else str(self.number)
        return WorkerStats(name, self.node, self.state, self.batches, self.decode_s,
                           self.nbytes, self.wait_s, self.redone, self.taken_back)


class WorkerPool:
    """The actors of one loader; `add` more at any time; `close` kills them all."""

    def __init__(self, options: Remote, recipe: Callable[[], BatchWork]) -> None:
        self.ray = import_ray()
        self.options = options
        self.lost_errors = lost_errors(self.ray)
        self._started_ray = join_ray(self.ray, options)
        self._recipe = recipe
        self._actor_class = self.ray.remote(
            num_cpus=options.num_cpus, resources=dict(options.resources) or None,
            max_restarts=0, max_task_retries=0)(BatchWorker)
        self.workers: list[Worker] = []
        self.local = Worker(-1, None, None, "live")  # the trainer's own decode, counted alike
        self.absorb_s: float | None = None  # the trainer's seconds to take in a worker's batch
        self._lock = threading.Lock()
        self.closed = False
        self.add(options.workers)
        self.wait_started(options.startup_timeout)

    def add(self, count: int = 1) -> None:
        """Start `count` more actors; each takes batches once it answered ready()."""
        if self.closed:
            raise FastloaderError("this loader was closed; its remote workers are gone")
        with self._lock:
            for _ in range(count):
                actor = self._actor_class.remote(self._recipe)
                self.workers.append(Worker(len(self.workers), actor, actor.ready.remote()))

    def wait_started(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the starting actors; FastloaderError if none of
        this loader's actors is live then (an actor whose start failed is named)."""
        deadline = time.monotonic() + timeout
        while self.starting() and time.monotonic() < deadline:
            self.poll(0.1)
        if not self.live():
            self.close()
            resources = self.options.resources
            needs = f"{self.options.num_cpus:g} free CPUs" + (
                f" and the resources {dict(resources)}" if resources else "")
            raise FastloaderError(
                f"none of the {len(self.workers)} remote workers started within {timeout:g} s "
                f"({self._why_not()}). Check that the cluster has {needs} a worker, and that "
                "fastloader is installed on its nodes; or raise startup_timeout.")
        if self.starting():
            log.warning("%d remote workers have not started yet; they join when they do",
                        len(self.starting()))

    def _why_not(self) -> str:
        for worker in self.workers:
            try:
                self.ray.get(worker.started, timeout=0)
            except Exception as exc:  # the actor's failed start, or not started yet
                return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return "no reason given"

    def poll(self, timeout: float = 0.0) -> None:
        """Take in the actors that started (or failed to) since the last look."""
        starting = {w.started: w for w in self.starting()}
        if not starting:
            return
        done, _ = self.ray.wait(list(starting), num_returns=len(starting), timeout=timeout)
        for ref in done:
            worker = starting[ref]
            try:
                where = self.ray.get(ref)
                worker.node, worker.pid = where["node"], where["pid"]
                worker.state = "live"
            except Exception as exc:  # its start failed (no resources on a node, an import)
                log.warning("remote worker %d did not start: %s", worker.number, exc)
                self.lose(worker)

    def starting(self) -> list[Worker]:
        return [w for w in self.workers if w.state == "starting"]

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.state == "live"]

    def lose(self, worker: Worker) -> None:
        """Mark `worker` lost for good, and end it if it still runs somewhere."""
        worker.state = "lost"
        with contextlib.suppress(Exception):
            self.ray.kill(worker.actor, no_restart=True)

    def stats(self) -> tuple[WorkerStats, ...]:
        return (*(w.snapshot() for w in self.workers), self.local.snapshot())

    def close(self) -> None:
        """Kill every actor of this loader; shut down a local Ray this pool started."""
        if self.closed:
            return
        self.closed = True
        ray = self.ray
        if ray.is_initialized():  # else Ray's own exit hook ran first: its actors are gone
            for worker in self.workers:
                with contextlib.suppress(Exception):
                    ray.kill(worker.actor, no_restart=True)
                worker.state = "lost"
        if self._started_ray:
            leave_ray(ray)
