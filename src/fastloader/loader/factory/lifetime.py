"""Every loader's lifetime in its process: closed at interpreter exit, told after fork()."""

from __future__ import annotations

import atexit
import contextlib
import os
import weakref
from typing import Any

# Every loader built in this process, weakly: closed at interpreter exit, told after fork().
_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    """Stop every loader's threads before the interpreter finalizes.

    A producer thread is a daemon; once finalization starts, a daemon thread that returns from
    native decode (GIL released) is killed by pthread_exit while it takes the GIL back, and that
    forced unwind through C++ aborts the process ("terminate called without an active
    exception", exit code 134). atexit runs before that point, so joining the threads here
    makes exit clean however a loader was left: finished, broken out of, raised through,
    still referenced by a live iterator, or never closed.
    """
    for loader in list(_LIVE):
        with contextlib.suppress(Exception):
            loader.close()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: let each loader drop what they held."""
    for loader in list(_LIVE):
        with contextlib.suppress(Exception):
            loader._after_fork_in_child()


atexit.register(_close_all_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)


def track(loader: Any) -> None:
    """Close `loader` at exit and tell it after fork() (weakly: it may be collected first)."""
    _LIVE.add(loader)
