"""A fixed ring of preallocated uint8 NHWC batch buffers (pinned with CUDA), reused safely."""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np
import torch

from fastloader.errors import invalid_argument


class BatchRing:
    """`slots` buffers of shape (batch_size, height, width, 3), allocated once.

    A slot goes producer -> consumer -> back to the free list. With CUDA the consumer releases
    a slot together with the event recorded after its host-to-device copy, and the producer
    waits on that event before writing the slot again, so a copy still in flight is never
    overwritten. Without CUDA the consumer releases a slot only after the device step has
    produced a new tensor from it, so batches handed to the user never alias the ring.
    """

    def __init__(self, slots: int, batch_size: int, height: int, width: int, pin: bool) -> None:
        if slots < 1:
            raise invalid_argument("slots", slots, "a ring needs at least one slot", "Pass >= 1.")
        self._shape = (batch_size, height, width, 3)
        self.pinned = bool(pin)
        self.buffers: list[torch.Tensor] = []
        self.arrays: list[np.ndarray] = []  # zero-copy numpy views of the buffers
        self._events: list[Any] = []
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.grow(slots)

    def grow(self, slots: int) -> None:
        """Add free slots up to `slots` in all (never shrinks).

        Only the autotuner calls this with a larger count, and only while it is settling
        (prefetch="auto"), within its memory budget; afterwards the ring's size is fixed.
        """
        for slot in range(self.slots, slots):
            buffer = torch.empty(self._shape, dtype=torch.uint8, pin_memory=self.pinned)
            self.buffers.append(buffer)
            self.arrays.append(buffer.numpy())
            self._events.append(None)
            self._free.put(slot)

    @property
    def slots(self) -> int:
        return len(self.buffers)

    @property
    def nbytes(self) -> int:
        """Bytes of host (pinned when CUDA) memory the ring holds."""
        return sum(buffer.numel() for buffer in self.buffers)

    def reset(self) -> None:
        """Mark every slot free (call only when no producer or consumer holds one)."""
        while True:
            try:
                self._free.get_nowait()
            except queue.Empty:
                break
        for slot in range(self.slots):
            self._free.put(slot)

    def acquire(self, stop: threading.Event, poll_s: float = 0.05) -> int | None:
        """A free slot, safe to overwrite; None when `stop` is set while waiting."""
        while not stop.is_set():
            try:
                slot = self._free.get(timeout=poll_s)
            except queue.Empty:
                continue
            event = self._events[slot]
            if event is not None:
                event.synchronize()  # its H2D copy must finish before we overwrite it
                self._events[slot] = None
            return slot
        return None

    def release(self, slot: int, event: Any = None) -> None:
        """Give a slot back; `event` (a CUDA event) must complete before it is reused."""
        self._events[slot] = event
        self._free.put(slot)

    def view(self, slot: int, count: int) -> tuple[torch.Tensor, np.ndarray]:
        """The first `count` images of a slot, as a tensor and a numpy array sharing memory."""
        return self.buffers[slot][:count], self.arrays[slot][:count]
