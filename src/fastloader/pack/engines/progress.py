"""Progress of a pack's shard tasks: the progress callback and tqdm's bar on a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from fastloader.pack.staging.journal import RESUME_LOG
from fastloader.pack.staging.plan import Spans

Progress = Callable[[int, int, int], None]  # (items done, items total, source bytes done)


class Bar(Protocol):
    """What the meter uses of tqdm's bar (tqdm itself is untyped)."""

    def update(self, n: int) -> object: ...
    def set_postfix_str(self, s: str, refresh: bool) -> None: ...
    def close(self) -> None: ...


def progress_bar(total: int, quiet: bool, initial: int = 0) -> Bar | None:
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


def note_reused(plan: Spans, todo: Sequence[int]) -> None:
    """Say on the resume log how many finished shards a resume keeps and how many it packs."""
    kept = plan.num_shards - len(todo)
    RESUME_LOG.warning("resume: reusing %d of %d shards already packed; packing the other %d",
                       kept, plan.num_shards, len(todo))
