"""How packdata stops on a signal: SIGTERM (what SLURM and Kubernetes send on preemption)
unwinds it as Ctrl-C does, in its own process only, and the signal is noted so the exit code
says which one came whatever exception surfaced."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

EXIT_INTERRUPTED = 128 + signal.SIGINT  # what a shell reports for a process killed by SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM  # ... and by SIGTERM: a requeueing scheduler sees it


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C's KeyboardInterrupt is: the same unwinding
    (the pool stopped, the staging released and kept for --resume where a shard finished,
    pipeline/drive.staging_kept); its exit code comes from
    the Stop its handler noted, which outlives an exception raised over this one."""


class Stop:
    """The stop signal one main() call received, if any (kept by its handler before raising)."""

    def __init__(self) -> None:
        self.signum: int | None = None


def main_process_only(error: type[BaseException], stop: Stop
                      ) -> Callable[[int, FrameType | None], None]:
    """A handler raising error in this process only (and noting the signal in stop): a pool
    worker forked from it inherits the handler until its initializer
    (engines/pool.worker_signals) installs its own, and a signal landing in that moment must
    not unwind the worker (a traceback, and a queue lock it may hold); the pool stops it (and
    its watchdog signals it again)."""
    owner = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() == owner:
            stop.signum = signum
            raise error()

    return handler


@contextlib.contextmanager
def sigterm_as_interrupt(stop: Stop) -> Iterator[None]:
    """While packdata runs, SIGTERM stops it as SIGINT does (signal handlers belong to the main
    thread: elsewhere, e.g. main() called from a thread, nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, main_process_only(Terminated, stop))
    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if ours:  # an ignored SIGINT (nohup, &) stays ignored
        signal.signal(signal.SIGINT, main_process_only(KeyboardInterrupt, stop))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
