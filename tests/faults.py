"""Faults for pack's tests, injected from the test side (the library reads no switch for them).

- a shard task that dies once after writing its shard (torn to half, no part recorded), and
  one that records the Ray node it ran on: wrappers of the engine's task function, installed
  with `patch_ray_task` (in this process) and pickled to Ray's workers by value, so the
  workers need not import this module;
- a `packdata` child that SIGKILLs itself after N parts, or holds just before its final
  rename until a file appears: `packdata_command(argv, ...)` runs the CLI in a child through
  `child_main`, which patches the engine's part writer or the staging's finish first;
- a dead process left holding a pool's result-queue lock as the pool stops (what a worker
  killed half-way through sending a result, or while taking a task, leaves):
  `packdata_command(argv, dead_lock="result" | "task")`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TESTS = str(Path(__file__).resolve().parent)


def _torn_once(staging: Any, k: int, die_in: int, flag: str) -> None:
    """Shard die_in's first attempt (flag absent, its folder present): tear the shard file the
    task just wrote to half, forget its part, and end the worker at once (os._exit)."""
    if k != die_in or not os.path.isdir(os.path.dirname(flag)) or os.path.exists(flag):
        return
    folder = Path(staging)
    Path(flag).write_text(str(os.getpid()))
    for shard in folder.glob(f"shard-{k:05d}.*"):
        os.truncate(shard, shard.stat().st_size // 2)
    for suffix in (".json", ".part.npz"):
        (folder / "journal" / f"{k:05d}{suffix}").unlink(missing_ok=True)
    os._exit(1)


def _faulty_task(real: Callable[..., Any], die_in: int | None, flag: str | None,
                 nodes: str | None, staging: Any, k: int, *extra: Any) -> Any:
    done = real(staging, k, *extra)
    if nodes and os.path.isdir(nodes):
        import ray

        if ray.is_initialized():
            Path(nodes, f"{k}.node").write_text(ray.get_runtime_context().get_node_id())
    if die_in is not None and flag is not None:
        _torn_once(staging, k, die_in, flag)
    return done


def faulty(real: Callable[..., Any], *, die_in: int | None = None, flag: str | Path | None = None,
           nodes: str | Path | None = None) -> Callable[..., Any]:
    """real (a shard task: task(staging, k, *extra)) with the faults asked for: shard die_in's
    first attempt dies torn (while flag's folder exists and flag does not; flag then exists),
    and each task writes its Ray node id into nodes/K.node (while that folder exists)."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    flag_path = None if flag is None else str(flag)
    nodes_path = None if nodes is None else str(nodes)

    def task(staging: Any, k: int, *extra: Any) -> Any:  # ray.remote takes functions only
        return _faulty_task(real, die_in, flag_path, nodes_path, staging, k, *extra)

    return task


def patch_ray_task(setattr: Callable[[Any, str, Any], None], **faults: Any) -> None:
    """Make the Ray engine run its shard tasks (build.run_shard, every source's) with `faults`
    (see faulty); setattr is monkeypatch.setattr, or plain setattr in a child process."""
    from fastloader.pack.engines import ray

    setattr(ray, "run_shard", faulty(ray.run_shard, **faults))


def _kill_after_parts(n: int) -> None:
    """SIGKILL this process right after the local engine wrote its nth part of this run."""
    from fastloader.pack.engines import local

    written = [0]

    def counting(real: Callable[..., Any]) -> Callable[..., Any]:
        def build(*args: Any, **kwargs: Any) -> Any:
            part = real(*args, **kwargs)
            written[0] += 1
            if written[0] >= n:
                os.kill(os.getpid(), signal.SIGKILL)
            return part
        return build

    local.build_part = counting(local.build_part)  # type: ignore[assignment]


def _hold_before_rename(hold: str) -> None:
    """The staging's finish waits once its manifest is written, just before the rename into
    DST: it writes HOLD/waiting, then waits (at most a minute) for HOLD/go."""
    from fastloader.pack.staging.journal import Staging

    finish = Staging.finish

    def held(self: Staging, write_manifest: Any, overwrite: bool) -> None:
        def then_hold(folder: Path) -> None:
            write_manifest(folder)
            (Path(hold) / "waiting").write_text(str(folder))
            deadline = time.monotonic() + 60
            while not (Path(hold) / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.01)

        finish(self, then_hold, overwrite)

    Staging.finish = held  # type: ignore[method-assign]


def _dead_lock_at_stop(which: str) -> None:
    """Each process pool's terminate() first leaves one of the pool's queue locks held by a dead
    process for good. "result": a forked process takes the result queue's write lock and dies
    (os._exit), as a worker killed while sending a result leaves it (terminate() needs it to
    send its sentinel). "task": every worker is SIGKILLed first (one idle in get() holds the
    task queue's read lock while it waits for a task), then a forked process takes that lock,
    if it is free within a second, and dies: either way a dead process holds it, as a worker
    killed while taking a task leaves it (terminate() takes it to drain the tasks). Patched on
    multiprocessing's Pool, so it applies to any engine's pool."""
    from multiprocessing.connection import wait
    from multiprocessing.pool import Pool

    terminate = Pool.terminate

    def dead_then_terminate(self: Any) -> None:
        lock = {"result": self._outqueue._wlock, "task": self._inqueue._rlock}[which]
        if which == "task":
            workers = list(self._pool)
            for worker in workers:
                os.kill(worker.pid, signal.SIGKILL)
            wait([worker.sentinel for worker in workers])
        holder = os.fork()
        if holder == 0:
            lock.acquire(timeout=1.0)
            os._exit(0)
        os.waitpid(holder, 0)
        terminate(self)

    Pool.terminate = dead_then_terminate  # type: ignore[method-assign]


def packdata_command(argv: list[str], *, kill_after_parts: int | None = None,
                     hold: str | Path | None = None, ray: dict[str, Any] | None = None,
                     dead_lock: str | None = None) -> list[str]:
    """The command line of a `packdata ARGV` child with these faults installed first:
    kill_after_parts (SIGKILL after that many parts), hold (a folder: wait before the final
    rename), ray (faulty's keywords, for the Ray tasks it starts), dead_lock ("result" or
    "task": that queue lock of a pool left held by a dead process as the pool stops)."""
    config = json.dumps({"kill_after_parts": kill_after_parts,
                         "hold": None if hold is None else str(hold), "ray": ray,
                         "dead_lock": dead_lock})
    code = (f"import sys; sys.path.insert(0, {TESTS!r}); import faults; "
            "sys.exit(faults.child_main(sys.argv[1], sys.argv[2:]))")
    return [sys.executable, "-c", code, config, *argv]


def child_main(config: str, argv: list[str]) -> int:
    """packdata's main(argv) in this (child) process, after installing the faults asked."""
    faults = json.loads(config)
    if faults["kill_after_parts"]:
        _kill_after_parts(faults["kill_after_parts"])
    if faults["hold"]:
        _hold_before_rename(faults["hold"])
    if faults["ray"]:
        patch_ray_task(setattr, **faults["ray"])
    if faults.get("dead_lock"):
        _dead_lock_at_stop(faults["dead_lock"])
    from fastloader.pack.cli.main import main

    return main(argv)
