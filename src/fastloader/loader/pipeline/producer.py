"""The one batch producer of every packed loader: a thread that, per batch, takes a ring slot,
has the records kind's filler fill it, and queues the result for the consumer.

What differs by kind is the filler (BatchFiller): images' (loader/images/batches.ImageBatches: the
planned crops decoded natively, masks built beside them) and timed clips'
(loader/clips/loader.ClipBatches: audio, video). What every kind shares is here: the read-ahead
helper thread (the filler's `prepare` of batch b + 1 runs while batch b fills), the slot wait on
the ring (loader/pipeline/memory.BatchRing, page-locked on CUDA), an AutoTuner's setting applied
between batches, a prompt stop, and one error rule: a failure ends the pass, and the consumer's
next() raises it chained to the original, naming the stage ("read", "plan", "masks", "decode",
"slot wait", "tune") and the batch.

A filler with no ring (a clip batch on the CPU, handed to the user as it is written) is held
`depth` batches ahead by the queue instead.
"""

from __future__ import annotations

import copy
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from fastloader.errors import FastloaderError, ProducerError
from fastloader.loader.pipeline.autotune import AutoTuner, Setting
from fastloader.loader.pipeline.memory import BatchRing
from fastloader.loader.pipeline.stats import Counters, Timer
from fastloader.loader.pipeline.threads import Worker

_thread_ids = itertools.count()
_STOPPED = -1  # _acquire's answer once the pass was stopped (ring slots count from 0)


class Filled(Protocol):
    """A filled batch as queued: how many samples it holds."""

    @property
    def count(self) -> int: ...


Prepared = TypeVar("Prepared")
Batch = TypeVar("Batch", bound=Filled)
Batch_co = TypeVar("Batch_co", bound=Filled, covariant=True)


class BatchFiller(Protocol[Prepared, Batch_co]):
    """A records kind's side of the producer: what batch b holds, and writing it to a slot.

    `read_ahead`: prepare does real work (reads, plans), so it runs on the helper thread one
    batch ahead; False: it is cheap and runs on the producer's own thread."""

    read_ahead: bool

    def prepare(self, b: int) -> Prepared:
        """Read and plan batch b, on the helper thread while the batch before it fills; a
        failure raises StageError naming the stage."""

    def fill(self, b: int, slot: int | None, prepared: Prepared) -> Batch_co:
        """Decode prepared batch b into the ring's `slot` (None: no ring, a fresh buffer)."""


@dataclass(frozen=True)
class Tuning:
    """An AutoTuner measuring this pass, and how the filler takes its setting (decode
    threads) once the ring has grown to the setting's depth: apply(setting, ring slots)."""

    tuner: AutoTuner
    apply: Callable[[Setting, int], None]


class StageError(Exception):
    """The helper thread's failure in one stage of one batch; the original is __cause__."""

    def __init__(self, stage: str, batch: int) -> None:
        super().__init__(f"{stage} failed on batch {batch}")
        self.stage = stage
        self.batch = batch


class _Done:
    """Queue sentinel: the producer finished (error is set when it failed, with where)."""

    def __init__(self, error: BaseException | None = None, stage: str = "",
                 batch: int = -1) -> None:
        self.error = error
        self.stage = stage
        self.batch = batch


def producer_error(error: BaseException, stage: str, batch: int) -> BaseException:
    """The error to raise in the consumer for `error` raised on the producer's side.

    A fastloader error keeps its type (callers catch DecodeError, CorruptRecordError) and
    gains where it happened; any other exception becomes a ProducerError. Both are chained to
    the original (raise ... from error), whose traceback shows the producer's frames.
    KeyboardInterrupt and the like pass through as they are.
    """
    if not isinstance(error, Exception):
        return error
    where = f"[fastloader producer: stage {stage!r}, batch {batch}]"
    if isinstance(error, FastloaderError):
        wrapped: Exception = _with_message(error, f"{error} {where}")
    else:
        wrapped = ProducerError(f"{type(error).__name__}: {error} {where}. The dataset or a "
                                "transform raised it while a batch was prepared.")
    wrapped.__cause__ = error
    return wrapped


def _with_message(error: FastloaderError, message: str) -> Exception:
    """`error` again, saying `message`: a copy (through its own __reduce__, so a subclass with
    another constructor keeps its type and facts, a DiskFullError its folder and sizes) whose
    message is replaced; a ProducerError where it cannot be copied."""
    try:
        copied = copy.copy(error)
    except Exception:
        return ProducerError(f"{type(error).__name__}: {message}")
    copied.args = (message,)
    return copied


class Producer(Generic[Prepared, Batch]):
    """The batches numbered `batches` of one pass, filled by `filler`, on a thread named
    fastloader-producer-N (its helper: fastloader-prepare-N)."""

    def __init__(self, filler: BatchFiller[Prepared, Batch], ring: BatchRing | None,
                 counters: Counters, batches: range, tuning: Tuning | None = None,
                 depth: int = 0) -> None:
        self.filler = filler
        self.ring = ring
        self.counters = counters
        self.batches = batches
        self.tuning = tuning
        self._where = ("start", batches.start)  # (stage, batch) the producer is in
        # With a ring its slots hold the producer back (and the lighter SimpleQueue will do);
        # without one, the queue's depth does.
        self.ready: queue.SimpleQueue[Batch | _Done] | queue.Queue[Batch | _Done] = (
            queue.SimpleQueue() if ring is not None else queue.Queue(depth))
        self.stop_event = threading.Event()
        self.name = f"fastloader-producer-{next(_thread_ids)}"
        self.thread: Worker | None = None
        self._next: Future[Prepared] | None = None  # the next batch's preparation, if ahead

    def start(self) -> Producer[Prepared, Batch]:
        self.thread = Worker(self._run, self.name)
        return self

    def _run(self) -> None:
        started = time.perf_counter()
        outcome = _Done()
        # A filler with nothing to read ahead prepares inline: a hop to the helper and back
        # costs two GIL hand-offs a batch, about 2% of the audio loader's throughput
        # (BENCHMARKS.md).
        helper = (ThreadPoolExecutor(1, thread_name_prefix=self.name.replace("producer",
                                                                             "prepare"))
                  if self.filler.read_ahead else None)
        try:
            self._next = self._prepare_later(helper, self.batches.start)
            for b in self.batches:
                if not self._produce(b, helper):
                    break
        except StageError as exc:  # the read or plan failed (on the helper thread, if any)
            outcome = _Done(exc.__cause__, exc.stage, exc.batch)
        except BaseException as exc:  # handed to the consumer, raised in the training loop
            outcome = _Done(exc, *self._where)
        finally:
            if helper is not None:
                helper.shutdown(wait=True, cancel_futures=True)
            self.counters.add_time("producer", time.perf_counter() - started)
            self._put(outcome)

    def _produce(self, b: int, helper: ThreadPoolExecutor | None) -> bool:
        """Batch b into a slot and onto the queue; False when the pass was stopped."""
        if self.tuning is not None:
            self._where = ("tune", b)
            self._apply(self.tuning.tuner.setting())
        slot_started = time.perf_counter()
        self._where = ("slot wait", b)
        slot = self._acquire()
        if slot == _STOPPED:
            return False
        fill_started = time.perf_counter()
        try:
            self._where = ("read", b)  # or plan: prepare raises StageError with its stage
            # batch b's own read errors surface here; b + 1 is read while b decodes
            upcoming = self._next
            prepared = upcoming.result() if upcoming is not None else self.filler.prepare(b)
            self._next = self._prepare_later(helper, b + 1)
            self._where = ("decode", b)
            ready = self.filler.fill(b, slot, prepared)
        except BaseException:
            if slot is not None and self.ring is not None:
                self.ring.release(slot)
            raise
        if self.tuning is not None:
            self._where = ("tune", b)
            self.tuning.tuner.record_produce(time.perf_counter() - fill_started,
                                             fill_started - slot_started, ready.count)
        return self._put(ready)

    def _acquire(self) -> int | None:
        """A free ring slot (None: no ring); _STOPPED when the pass was stopped meanwhile."""
        if self.ring is None:
            return _STOPPED if self.stop_event.is_set() else None
        with Timer(self.counters, "slot_wait"):
            slot = self.ring.acquire(self.stop_event)
        return _STOPPED if slot is None else slot

    def _put(self, item: Batch | _Done) -> bool:
        """Queue item; False (dropped) when the pass was stopped while the queue was full."""
        while True:
            try:
                self.ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                if self.stop_event.is_set():
                    return False

    def _prepare_later(self, helper: ThreadPoolExecutor | None, b: int
                       ) -> Future[Prepared] | None:
        """Batch b's preparation, started on the helper (None: no helper, b is prepared when
        its turn comes; or b is past the pass's end)."""
        if helper is None or b >= self.batches.stop:
            return None
        return helper.submit(self.filler.prepare, b)

    def _apply(self, setting: Setting) -> None:
        """Take the tuner's current setting; only the producer touches decoder and ring size."""
        assert self.tuning is not None
        if self.ring is not None and self.ring.slots < setting.prefetch + 1:
            self.ring.grow(setting.prefetch + 1)
        self.tuning.apply(setting, self.ring.slots if self.ring is not None else 0)

    def get(self, counters: Counters) -> Batch | None:
        """Next filled batch for the consumer; None at the end; re-raises producer errors."""
        started = time.perf_counter()
        try:
            while True:
                try:
                    item = self.ready.get(timeout=0.1)
                    break
                except queue.Empty:
                    if self.thread is not None and not self.thread.is_alive() \
                            and self.ready.empty():
                        raise FastloaderError(
                            "the fastloader producer thread ended without a result"
                        ) from None
        finally:
            counters.add_time("wait", time.perf_counter() - started)
        if isinstance(item, _Done):
            if item.error is not None:
                raise producer_error(item.error, item.stage, item.batch)
            return None
        return item

    def queue_depth(self) -> int:
        return self.ready.qsize()

    def shutdown(self) -> None:
        """Stop promptly (between batches or while waiting for a slot or for room in the
        queue) and join the thread."""
        self.stop_event.set()
        if self.thread is not None and not self.thread.is_current():
            self.thread.join()
        while True:  # drop queued batches; the caller resets the ring once nobody holds slots
            try:
                self.ready.get_nowait()
            except queue.Empty:
                break
