"""A fixed ring of preallocated uint8 NHWC batch buffers (page-locked with CUDA), reused safely."""

from __future__ import annotations

import mmap
import queue
import threading
import weakref
from typing import Any

import numpy as np
import torch

from fastloader.errors import FastloaderError, invalid_argument

PAGE = mmap.PAGESIZE
_HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable


def pinned_nbytes(nbytes: int) -> int:
    """Bytes a page-locked buffer of `nbytes` really holds: whole pages, nothing more."""
    return -(-max(nbytes, 1) // PAGE) * PAGE


class PinnedBuffer:
    """Exactly `nbytes` (rounded up to a page) of host memory, page-locked with cudaHostRegister.

    torch's pin_memory goes through its caching host allocator, which rounds each request up
    to a power of two (a 38.5 MB slot takes 64 MiB) and keeps the blocks after the ring is
    gone. Here an anonymous mmap is registered as it is and unregistered when the last
    reference goes, after every copy recorded against it (`events`) has finished.
    """

    def __init__(self, nbytes: int, events: list[Any]) -> None:
        self.nbytes = pinned_nbytes(nbytes)
        self._map = mmap.mmap(-1, self.nbytes)
        self.array = np.frombuffer(self._map, dtype=np.uint8)
        address = int(self.array.ctypes.data)
        cudart: Any = torch.cuda.cudart()
        # Portable: pinned for every device's context, whichever device is current now.
        error = cudart.cudaHostRegister(address, self.nbytes, _HOST_REGISTER_PORTABLE)
        if int(error) != 0:
            raise FastloaderError(
                f"cudaHostRegister of a {self.nbytes}-byte ring slot failed (CUDA error "
                f"{int(error)}): the locked-memory limit (ulimit -l) or host memory is too "
                "small. Lower memory_budget, prefetch or batch_size.")
        weakref.finalize(self, _unregister, cudart, address, events, self.array)


def _unregister(cudart: Any, address: int, events: list[Any], array: np.ndarray) -> None:
    """Wait for the copies that may still read the buffer, then unlock its pages."""
    for event in events:
        if event is not None:
            event.synchronize()
    cudart.cudaHostUnregister(address)  # `array` kept the mapping alive until now


class BatchRing:
    """`slots` buffers of shape (batch_size, height, width, 3), allocated once.

    A slot goes producer -> consumer -> back to the free list. With CUDA the consumer releases
    a slot together with the event recorded after its host-to-device copy, and the producer
    waits on that event before writing the slot again, so a copy still in flight is never
    overwritten. Without CUDA the consumer releases a slot only after the device step has
    produced a new tensor from it, so batches handed to the user never alias the ring.

    With CUDA (`pin`) every buffer is page-locked at its exact size (PinnedBuffer), and all
    `capacity` slots are allocated and registered here, before the first batch: grow() then
    only hands out more of them. Nothing is allocated or registered while training runs, so
    a CUDA graph captured later never sees a host allocation from this thread (the producer
    still waits on events: capture with capture_error_mode="thread_local").
    """

    def __init__(self, slots: int, batch_size: int, height: int, width: int, pin: bool,
                 capacity: int | None = None) -> None:
        if slots < 1:
            raise invalid_argument("slots", slots, "a ring needs at least one slot", "Pass >= 1.")
        self._shape = (batch_size, height, width, 3)
        self.pinned = bool(pin)
        self.buffers: list[torch.Tensor] = []
        self.arrays: list[np.ndarray] = []  # zero-copy numpy views of the buffers
        self._events: list[Any] = []
        self._pinned: list[PinnedBuffer] = []
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._used = 0
        if self.pinned:
            for _ in range(max(slots, capacity or 0)):
                self._allocate()
        self.grow(slots)

    @classmethod
    def of_bytes(cls, slots: int, nbytes: int, pin: bool,
                 capacity: int | None = None) -> BatchRing:
        """A ring of `slots` buffers of at least `nbytes` each, for batches of any shape and
        dtype (shaped()): a clip kind's, whose batch shape varies, or a batch of views."""
        return cls(slots, 1, 1, -(-nbytes // 3), pin, capacity)

    @property
    def slot_nbytes(self) -> int:
        """The bytes of each slot."""
        return int(np.prod(self._shape))

    def _allocate(self) -> None:
        count = self.slot_nbytes
        if self.pinned:
            pinned = PinnedBuffer(count, self._events)
            self._pinned.append(pinned)
            array = pinned.array[:count].reshape(self._shape)
            buffer = torch.from_numpy(array)
        else:
            buffer = torch.empty(self._shape, dtype=torch.uint8)
            array = buffer.numpy()
        self.buffers.append(buffer)
        self.arrays.append(array)
        self._events.append(None)

    def grow(self, slots: int) -> None:
        """Put slots in use up to `slots` in all (never shrinks).

        Only the autotuner calls this with a larger count, and only while it is settling
        (prefetch="auto"), within its memory budget. A pinned ring only hands out the slots
        it allocated at construction (its capacity): it never allocates later.
        """
        for slot in range(self._used, slots):
            if slot >= len(self.buffers):
                if self.pinned:
                    return  # capacity reached: no host allocation once training runs
                self._allocate()
            self._free.put(slot)
            self._used = slot + 1

    @property
    def slots(self) -> int:
        """Slots in use (a pinned ring may hold more, allocated up front)."""
        return self._used

    @property
    def nbytes(self) -> int:
        """Bytes of host memory the ring holds: what is page-locked, when pinned."""
        if self.pinned:
            return sum(pinned.nbytes for pinned in self._pinned)
        return sum(buffer.numel() for buffer in self.buffers)

    def reset(self) -> None:
        """Mark every slot free (call only when no producer or consumer holds one)."""
        while True:
            try:
                self._free.get_nowait()
            except queue.Empty:
                break
        for slot in range(self._used):
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

    def shaped(self, slot: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A slot's first bytes as an array of `shape` and `dtype` (they must fit)."""
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes > self.slot_nbytes:
            raise FastloaderError(f"internal: a batch of {nbytes} bytes does not fit a ring "
                                  f"slot of {self.slot_nbytes}")
        return self.arrays[slot].reshape(-1)[:nbytes].view(dtype).reshape(shape)

    def view(self, slot: int, count: int) -> tuple[torch.Tensor, np.ndarray]:
        """The first `count` images of a slot, as a tensor and a numpy array sharing memory."""
        return self.buffers[slot][:count], self.arrays[slot][:count]
