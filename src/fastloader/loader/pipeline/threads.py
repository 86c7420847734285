"""Background threads whose Thread objects die in their own thread, never in the training loop.

CPython runs Python code when a `threading.Thread` object is freed: threading keeps every
Thread in a WeakSet (`threading._dangling`), whose removal callback is a Python function. A
callback cannot raise, so a Ctrl-C whose KeyboardInterrupt lands inside it is printed as
"Exception ignored in ... WeakSet._remove" and lost. A pass's producer Thread used to be freed
in the main thread, when the pass's iterator was dropped at the end of an epoch: the Ctrl-C
soak (tests/test_exit_installed.py) lost 1 of 300 interrupts there. A `Worker` keeps no
reference to its Thread, so the only one left at the end is threading's own, dropped by the
thread itself as it exits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Worker:
    """A daemon thread running target() once, known here by a done event and its ident."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        self.name = name
        self._done = threading.Event()
        self._ident: int | None = None
        threading.Thread(target=self._run, args=(target,), name=name, daemon=True).start()

    def _run(self, target: Callable[[], None]) -> None:
        self._ident = threading.get_ident()
        try:
            target()
        finally:
            self._done.set()

    def is_alive(self) -> bool:
        """Whether target() has not returned yet."""
        return not self._done.is_set()

    def is_current(self) -> bool:
        """Whether the caller is this worker's thread."""
        return self._ident == threading.get_ident()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until target() has returned (at most timeout seconds); whether it has."""
        return self._done.wait(timeout)
