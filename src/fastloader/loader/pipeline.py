"""The batch producer: a thread that reads records, plans crops, decodes into ring slots, queues.

It runs ahead of the training loop by at most the ring's size (prefetch + 1 slots); it stops
between batches or while waiting for a slot as soon as its stop event is set. A helper thread
reads and plans batch b + 1 while batch b decodes (GIL released), so the decode threads do
not idle through that Python work between batches. With an
AutoTuner it applies the tuner's setting (decode threads, ring depth) between batches and
reports each batch's own time and its wait for a slot.

An error on either thread ends the pass; the consumer's next() raises it chained to the
original, naming the stage ("read", "plan", "masks", "decode", "slot wait", "tune") and the batch.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastloader.decode.augment import Transform, batch_rng, plan_geometry
from fastloader.decode.decode import BatchDecoder
from fastloader.decode.geometry import Geometry
from fastloader.decode.orientation import Turns
from fastloader.errors import CorruptRecordError, DecodeError, FastloaderError, ProducerError
from fastloader.format.dataset import PackedDataset
from fastloader.gpu.planar import PlanarSpec
from fastloader.loader.autotune import AutoTuner, Setting
from fastloader.loader.batch_transform import transform_planar, transform_slot
from fastloader.loader.masks import MaskBatches
from fastloader.loader.memory import BatchRing
from fastloader.loader.skips import RAISE_FIX, SkipBudget, no_replacement, replacements
from fastloader.loader.stats import Counters, Timer
from fastloader.loader.threads import Worker

_thread_ids = itertools.count()
log = logging.getLogger(__name__)  # a child of the "fastloader" logger


@dataclass(frozen=True)
class EpochPlan:
    """What one pass produces: this rank's index order, cut into batches from `start`.

    Batches are numbered in the epoch: `indices` begins with batch `first` (0, unless the
    pass resumes a checkpoint of another shape: loader/resume.py)."""

    indices: np.ndarray
    batch_size: int
    num_batches: int
    start: int
    epoch: int
    seed: int
    rank: int
    first: int = 0

    def batch(self, b: int) -> np.ndarray:
        k = b - self.first
        return self.indices[k * self.batch_size : (k + 1) * self.batch_size]


@dataclass(frozen=True)
class ReadyBatch:
    """A decoded batch waiting in its ring slot."""

    index: int
    slot: int
    count: int
    labels: np.ndarray
    samples: np.ndarray  # dataset indices actually delivered (after any skip replacement)
    images: torch.Tensor | None = None  # the fresh channel-first tensor with a PlanarSpec
    # the plan of the delivered samples (crops, flips, size, places): boxes follow their pixels
    geometry: Geometry | None = None
    masks: dict[str, torch.Tensor] | None = None  # mask fields, uint8 [B, H, W] (MaskBatches)


@dataclass(frozen=True)
class _Prepared:
    """A batch read and planned, waiting for a ring slot and the decoder."""

    samples: np.ndarray
    records: list[memoryview | bytes]
    failures: dict[int, FastloaderError]
    geometry: Geometry
    tiles: Any  # the batch's restart-tile tables (TileBatch), None for an untiled dataset
    masks: dict[str, torch.Tensor] | None = None


class _Done:
    """Queue sentinel: the producer finished (error is set when it failed, with where)."""

    def __init__(self, error: BaseException | None = None, stage: str = "",
                 batch: int = -1) -> None:
        self.error = error
        self.stage = stage
        self.batch = batch


class _StageError(Exception):
    """The helper thread's failure in one stage of one batch; the original is __cause__."""

    def __init__(self, stage: str, batch: int) -> None:
        super().__init__(f"{stage} failed on batch {batch}")
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
        try:
            wrapped: Exception = type(error)(f"{error} {where}")
        except Exception:  # a subclass with another constructor
            wrapped = ProducerError(f"{type(error).__name__}: {error} {where}")
    else:
        wrapped = ProducerError(f"{type(error).__name__}: {error} {where}. The dataset or a "
                                "transform raised it while a batch was prepared.")
    wrapped.__cause__ = error
    return wrapped


def _planar_kwargs(spec: PlanarSpec | None, images: torch.Tensor | None, start: int,
                   stop: int) -> dict[str, Any]:
    """decode_into's arguments for writing images[start:stop] channel-first, if asked."""
    if spec is None or images is None:
        return {}
    return spec.decode_kwargs(images[start:stop])


class Producer:
    """One pass over an EpochPlan on a thread named fastloader-producer-N."""

    def __init__(
        self,
        dataset: PackedDataset,
        transforms: Sequence[Transform],
        decoder: BatchDecoder,
        ring: BatchRing,
        counters: Counters,
        on_error: str,
        epoch_plan: EpochPlan,
        tuner: AutoTuner | None = None,
        planar: PlanarSpec | None = None,
        max_skips: int | float | None = None,
        batch_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        box_field: str | None = None,
        masks: MaskBatches | None = None,
        turns: Turns | None = None,
    ) -> None:
        self.dataset = dataset
        # how the images are shown: crops planned on these shapes (EXIF orientation applied?)
        self.turns = turns if turns is not None else Turns(dataset.stored_shapes, None)
        self.box_field = box_field  # the boxes column RandomIoUCrop plans from, if any
        self.masks = masks  # mask fields built on the helper thread with each batch's plan
        self.budget = SkipBudget(max_skips, len(epoch_plan.indices))
        self._where = ("start", epoch_plan.start)  # (stage, batch) the producer is in
        self.batch_transform = batch_transform
        self.tuner = tuner
        self.transforms = tuple(transforms)
        self.decoder = decoder
        self.ring = ring
        self.counters = counters
        self.on_error = on_error
        self.plan = epoch_plan
        self.planar = planar
        if planar is not None:
            planar.pool.reserve(ring.slots + 1)
        # CPU target with a batch_transform: the decoder writes uint8 channel-first pixels
        # here (fused, on its threads) for the transform; the output is filled from them.
        self.staging = (PlanarSpec(torch.uint8) if planar is not None and batch_transform
                        is not None else None)
        self.ready: queue.SimpleQueue[ReadyBatch | _Done] = queue.SimpleQueue()
        self.stop_event = threading.Event()
        self.name = f"fastloader-producer-{next(_thread_ids)}"
        self.thread: Worker | None = None

    def start(self) -> Producer:
        self.thread = Worker(self._run, self.name)
        return self

    def _run(self) -> None:
        started = time.perf_counter()
        outcome = _Done()
        helper = ThreadPoolExecutor(1, thread_name_prefix=self.name.replace("producer",
                                                                            "prepare"))
        try:
            upcoming = self._prepare_later(helper, self.plan.start)
            for b in range(self.plan.start, self.plan.num_batches):
                if self.tuner is not None:
                    self._where = ("tune", b)
                    self._apply(self.tuner.setting())
                slot_started = time.perf_counter()
                self._where = ("slot wait", b)
                with Timer(self.counters, "slot_wait"):
                    slot = self.ring.acquire(self.stop_event)
                if slot is None:
                    break
                fill_started = time.perf_counter()
                try:
                    self._where = ("read", b)  # or plan: _prepare re-raises with its stage
                    prepared = upcoming.result()  # batch b's own read errors surface here
                    upcoming = self._prepare_later(helper, b + 1)
                    self._where = ("decode", b)
                    ready = self._fill(b, slot, prepared)
                except BaseException:
                    self.ring.release(slot)
                    raise
                if self.tuner is not None:
                    self._where = ("tune", b)
                    self.tuner.record_produce(time.perf_counter() - fill_started,
                                              fill_started - slot_started, ready.count)
                self.ready.put(ready)
        except _StageError as exc:  # the helper thread's read or plan failed
            outcome = _Done(exc.__cause__, exc.stage, exc.batch)
        except BaseException as exc:  # handed to the consumer, raised in the training loop
            outcome = _Done(exc, *self._where)
        finally:
            helper.shutdown(wait=True, cancel_futures=True)
            self.counters.add_time("producer", time.perf_counter() - started)
            self.ready.put(outcome)

    def _prepare_later(self, helper: ThreadPoolExecutor, b: int) -> Future[_Prepared]:
        if b >= self.plan.num_batches:
            done: Future[_Prepared] = Future()
            done.set_exception(IndexError(f"batch {b} is past the end of the pass"))
            return done
        return helper.submit(self._prepare, b)

    def _apply(self, setting: Setting) -> None:
        """Take the tuner's current setting; only the producer touches decoder and ring size."""
        if self.decoder.num_threads != setting.threads:
            self.decoder.num_threads = setting.threads
        if self.ring.slots < setting.prefetch + 1:
            self.ring.grow(setting.prefetch + 1)
        if self.planar is not None:  # as many recycled outputs as batches may be in flight
            self.planar.pool.reserve(self.ring.slots + 1)

    def _prepare(self, b: int) -> _Prepared:
        """Read and plan batch b (on the helper thread, while the previous batch decodes)."""
        samples = self.plan.batch(b).copy()
        try:
            with Timer(self.counters, "read"):
                records, failures = self._read(samples)
                tiles = self.dataset.tile_batch(samples)
        except Exception as exc:
            raise _StageError("read", b) from exc
        try:
            with Timer(self.counters, "plan"):
                rng = batch_rng(self.plan.seed, self.plan.epoch, b, self.plan.rank)
                geometry = self._plan(samples, rng)
        except Exception as exc:
            raise _StageError("plan", b) from exc
        masks = None
        if self.masks is not None:
            try:
                with Timer(self.counters, "plan"):  # the spatial fields' share of the plan
                    masks = self.masks.build(samples, geometry)
            except Exception as exc:
                raise _StageError("masks", b) from exc
        return _Prepared(samples, records, failures, geometry, tiles, masks)

    def _plan(self, samples: np.ndarray, rng: np.random.Generator) -> Geometry:
        """The samples' geometry; RandomIoUCrop reads their boxes from the dataset's column."""
        columns = self.dataset.columns  # a boxes field lives in a v2 dataset's columns
        boxes = (None if self.box_field is None or columns is None
                 else columns.gather_arrays(self.box_field, samples))
        geometry = plan_geometry(self.transforms, self.turns.shapes[samples], rng,
                                 self.turns.boxes(samples, boxes))
        return self.turns.attach(geometry, samples)

    def _fill(self, b: int, slot: int, prepared: _Prepared) -> ReadyBatch:
        """Decode prepared batch b into `slot`, repairing or reporting bad samples."""
        samples, failures = prepared.samples, prepared.failures
        _, out = self.ring.view(slot, len(samples))
        # Taken with the slot, so planar tensors in flight never outnumber the ring's slots.
        images = self.planar.allocate(len(samples), *out.shape[1:3]) if self.planar else None
        spec, target = self.planar, images  # what the decoder writes channel-first, if any
        if self.staging is not None:
            spec, target = self.staging, self.staging.allocate(len(samples), *out.shape[1:3])
        with Timer(self.counters, "decode"):
            geometry = prepared.geometry
            errors = self.decoder.decode_into(prepared.records, geometry.crops, geometry.flips,
                                              out, tiles=prepared.tiles, places=geometry.places,
                                              fill=geometry.fill,
                                              orientations=geometry.orientations,
                                              **_planar_kwargs(spec, target, 0, len(samples)))
            for k, message in enumerate(errors):
                if message is not None and k not in failures:
                    failures[k] = DecodeError(f"{self.dataset.describe(samples[k])}: {message}")
            for k, error in sorted(failures.items()):
                samples[k], replacement = self._recover(b, k, int(samples[k]), error, out,
                                                        spec, target)
                geometry = geometry.with_sample(k, replacement)
                if prepared.masks is not None and self.masks is not None:
                    self.masks.replace(prepared.masks, k, int(samples[k]), geometry)
            if self.batch_transform is not None:  # stats: decode_s includes it
                if target is not None and images is not None and self.planar is not None:
                    images = transform_planar(self.batch_transform, target, images,
                                              self.planar, self.decoder)
                else:
                    transform_slot(self.batch_transform, out)
        labels = np.asarray(self.dataset.labels[samples], dtype=np.int64)
        return ReadyBatch(b, slot, len(samples), labels, samples, images, geometry,
                          prepared.masks)

    def _read(self, samples: np.ndarray
              ) -> tuple[list[memoryview | bytes], dict[int, FastloaderError]]:
        records: list[memoryview | bytes] = []
        failures: dict[int, FastloaderError] = {}
        for k, i in enumerate(samples.tolist()):
            try:
                records.append(self.dataset.record(i))
            except CorruptRecordError as exc:
                failures[k] = exc
                records.append(b"")
        return records, failures

    def _recover(self, b: int, k: int, sample: int, error: FastloaderError,
                 out: np.ndarray, spec: PlanarSpec | None, images: torch.Tensor | None
                 ) -> tuple[int, Geometry]:
        """on_error="raise": raise. "skip": decode a replacement into out[k], return its index
        and its one-sample geometry.

        Replacements are the next records after the bad one (sample+1, sample+2, ...), planned
        from a generator keyed by (seed, epoch, batch, rank, position, attempt): deterministic.
        """
        if self.on_error == "raise":
            raise type(error)(f"{error} (batch {b}, position {k}). {RAISE_FIX}") from error
        description = self.dataset.describe(sample)
        self.counters.add_skip(description)
        log.warning("on_error='skip': %s (batch %d, position %d) replaced: %s",
                    description, b, k, error)
        self.budget.spend(description)
        key = (self.plan.seed, self.plan.epoch, b, self.plan.rank, k)
        for candidate, rng in replacements(sample, len(self.dataset), key):
            try:
                record = self.dataset.record(candidate)
            except CorruptRecordError:
                continue
            geometry = self._plan(np.array([candidate]), rng)
            tiles = self.dataset.tile_batch([candidate])
            if self.decoder.decode_into([record], geometry.crops, geometry.flips,
                                        out[k : k + 1], tiles, places=geometry.places,
                                        fill=geometry.fill, orientations=geometry.orientations,
                                        **_planar_kwargs(spec, images, k, k + 1))[0] is None:
                log.info("replacement for %s: record %d", description, candidate)
                return candidate, geometry
        raise no_replacement(str(error))

    def get(self, counters: Counters) -> ReadyBatch | None:
        """Next decoded batch for the consumer; None at the end; re-raises producer errors."""
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
        """Stop promptly (between batches or while waiting for a slot) and join the thread."""
        self.stop_event.set()
        if self.thread is not None and not self.thread.is_current():
            self.thread.join()
        while True:  # drop queued batches; the caller resets the ring once nobody holds slots
            try:
                self.ready.get_nowait()
            except queue.Empty:
                break
