"""What a timed kind's batch decoder is to the clip loader (loader/clips/loader.py): the ClipDecoder
protocol, a failed clip, and the two loops every such decoder shares: a batch's rows decoded on
its threads (decode_rows) and a failed clip replaced under on_error="skip" (replace_failed)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, Protocol, TypeVar

import numpy as np
import torch

from fastloader.errors import CorruptRecordError, DecodeError
from fastloader.loader.pipeline.skips import no_replacement, replacements


class Failure(NamedTuple):
    """A clip that failed: its batch row and sample, and why."""

    row: int
    sample: int
    error: Exception

    def named(self, where: str) -> str:
        """Why it failed, led by which sample and record it is (where), unless the dataset's
        own error names the record already (a record that fails its checksum)."""
        text = str(self.error).rstrip(".")
        return text if isinstance(self.error, CorruptRecordError) else f"{where}: {text}"


T = TypeVar("T")


def decode_rows(pool: ThreadPoolExecutor, threads: int, indices: np.ndarray,
                decode: Callable[[int, int], T]) -> tuple[list[T | None], list[Failure]]:
    """decode(row, sample) for every row of a batch on the pool: (each row's result, None
    where it failed; the failures, by row).

    One task per thread, not per clip: each takes the batch's next row until none is left
    (next() on a shared iterator is atomic under the GIL), so a batch costs `threads`
    hand-offs to the pool, and long clips still spread over the threads."""
    rows = iter(range(len(indices)))
    results: list[T | None] = [None] * len(indices)
    failures: list[Failure] = []

    def work() -> None:
        for row in rows:
            sample = int(indices[row])
            try:
                results[row] = decode(row, sample)
            except (DecodeError, CorruptRecordError) as exc:
                failures.append(Failure(row, sample, exc))

    tasks = [pool.submit(work) for _ in range(min(threads, len(indices)))]
    for task in tasks:
        task.result()
    return results, sorted(failures, key=lambda failure: failure.row)


def replace_failed(failure: Failure, count: int, decode: Callable[[int], T]) -> tuple[int, T]:
    """on_error="skip": the samples after the failed one tried in turn (skips.py's
    candidates; each clip's window and crop are drawn from its own key, so their generators go
    unused), the first that decodes, decode(sample), written in its row; (its index, its
    result). DecodeError (skips.no_replacement) if none of them does."""
    for index, _ in itertools.islice(replacements(failure.sample, count, ()),
                                     max(0, count - 1)):
        try:
            return index, decode(index)
        except (DecodeError, CorruptRecordError):
            continue
    raise no_replacement(f"sample {failure.sample} cannot be decoded ({failure.error})")


class ClipDecoder(Protocol):
    """What a timed kind's batch decoder does for the producer (loader/clips/audio_batch.py,
    loader/clips/video_batch.py)."""

    kind: str  # the state_dict's "kind"
    threads: int
    backend: str  # stats()'s backend
    dtype: np.dtype  # the batch buffer's

    def durations(self) -> np.ndarray:
        """Each clip's seconds as read (the duration plan's)."""

    def shape(self, indices: np.ndarray) -> tuple[int, ...]:
        """The batch buffer's shape (an upper bound where lengths vary)."""

    def decode_into(self, indices: np.ndarray, seed: int, epoch: int, out: np.ndarray
                    ) -> tuple[np.ndarray, list[Failure]]:
        """Every clip of the batch into out: (per-clip facts, one row a clip; failures)."""

    def replace(self, failure: Failure, seed: int, epoch: int, out: np.ndarray
                ) -> tuple[int, int | np.ndarray]:
        """on_error="skip": another clip in the failed one's row; (its index, its facts)."""

    def trimmed(self, out: np.ndarray, facts: np.ndarray) -> np.ndarray:
        """The CPU batch cut to what its clips fill (a view or out itself)."""

    def finish(self, clips: torch.Tensor, facts: torch.Tensor, from_ring: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's clips entry, on the device (clips there already; from_ring: the
        buffer was a ring slot, not trimmed yet)."""

    def close(self) -> None: ...

    def after_fork(self) -> None: ...
