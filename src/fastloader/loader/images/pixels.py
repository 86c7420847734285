"""The pixel ops' side of the images' filler: each batch's pixel program (decode/pixels), drawn per
sample on the producer's helper thread, then fused into the decode (the CPU route: the decode
workers run it on each slot while it is cache-hot) or handed with the batch to the consumer, which
runs it on the device after the copy (gpu/pixel_program.apply_program_torch).

A sample's program is a pure function of (seed, epoch, key, view): its key is its place in the
epoch, `(batch * batch_size + position) * world_size + rank`, unique across the ranks of a pass,
so the thread count, the batch's other samples and a resume never change it. A sample replaced
under on_error="skip" takes its place's program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastloader.decode.pixels import PixelProgram, PixelTransform, draw_program


def sample_keys(batch: int, batch_size: int, count: int, world: int, rank: int) -> np.ndarray:
    """int64 [count]: the keys of batch `batch`'s samples (their places in the epoch)."""
    places = batch * batch_size + np.arange(count, dtype=np.int64)
    return places * max(world, 1) + rank


def program_row(program: PixelProgram | None, k: int) -> PixelProgram | None:
    """Sample k's program alone (a replacement decoded by itself)."""
    if program is None:
        return None
    return PixelProgram(np.ascontiguousarray(program.codes[k:k + 1]),
                        np.ascontiguousarray(program.params[k:k + 1]))


@dataclass(frozen=True)
class PixelPlan:
    """A view's pixel ops and where they run: fused in the decode, or on the device."""

    ops: tuple[PixelTransform, ...]
    on_device: bool

    def draw(self, seeds: tuple[int, int], keys: np.ndarray, view: int,
             size: tuple[int, int]) -> PixelProgram | None:
        """The samples' program at output `size` (None without ops); seeds: (seed, epoch)."""
        if not self.ops:
            return None
        return draw_program(self.ops, seeds[0], seeds[1], keys, view, size[0], size[1])

    def fused(self, program: PixelProgram | None) -> dict[str, Any]:
        """decode_into's `program` argument: the program when the decode runs it."""
        if program is None or self.on_device:
            return {}
        return {"program": program}

    def on_device_program(self, program: PixelProgram | None) -> PixelProgram | None:
        """The program the consumer runs after the copy (None: none, or fused)."""
        return program if self.on_device else None


def fused_programs(plans: Sequence[PixelPlan], programs: Sequence[PixelProgram | None]
                   ) -> dict[str, Any]:
    """decode_views_into's `programs` argument: each view's program the decode runs (None:
    that view's ops run on the device, or it has none); {} when no view's run there."""
    fused = [None if plan.on_device else program for plan, program in zip(plans, programs,
                                                                           strict=True)]
    return {"programs": fused} if any(p is not None for p in fused) else {}
