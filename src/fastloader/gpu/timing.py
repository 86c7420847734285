"""Device time of the copy step from CUDA events, read back without ever waiting on the GPU."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator

import torch


class DeviceTimer:
    """Sums the GPU time of intervals recorded on CUDA streams.

    The host only enqueues the copy and the conversion kernels; timing those calls measures
    the enqueue, not the work. Here each interval is a pair of CUDA events on the stream that
    runs it; a pair is read (elapsed_time) once its end event has completed, found by
    query(), so the totals trail the GPU by the batches still in flight and nothing syncs.
    """

    def __init__(self) -> None:
        self._pending: deque[tuple[torch.cuda.Event, torch.cuda.Event]] = deque()

    @contextlib.contextmanager
    def interval(self, stream: torch.cuda.Stream) -> Iterator[None]:
        """Time the work enqueued on `stream` inside the with block."""
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        yield
        end.record(stream)
        self._pending.append((start, end))

    def collect(self) -> float:
        """Seconds of the intervals that completed since the last call (oldest first)."""
        total = 0.0
        while self._pending and self._pending[0][1].query():
            start, end = self._pending.popleft()
            total += start.elapsed_time(end) / 1000.0
        return total

    def flush(self) -> float:
        """Wait for every pending interval and return their seconds (ends of passes, tests)."""
        if self._pending:
            self._pending[-1][1].synchronize()
        return self.collect()
