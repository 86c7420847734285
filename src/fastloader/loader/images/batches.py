"""Images' side of the producer (loader/pipeline/producer.py): ImageBatches reads a batch's records
and plans its crops (on the producer's helper thread, while the batch before it decodes), then
decodes them natively into a ring slot.

Per batch: the records, zero-copy from the shards; the geometry (decode/augment.plan_geometry,
RandomIoUCrop over the boxes column); the mask fields' batch (loader/images/masks), built with the
same geometry; the pixel ops' program (loader/images/pixels.py), fused into the decode or handed
to the consumer for the device; the decode into the slot (decode/decode.BatchDecoder, GIL
released), channel-first into a planar tensor as well on the CPU target, then the user's
batch_transform. Several views a sample: loader/images/views.py. A sample that
fails is raised with where it is, or (on_error="skip") replaced by the next records in turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastloader.decode.augment import Transform, batch_rng, plan_geometry
from fastloader.decode.decode import BatchDecoder
from fastloader.decode.geometry import Geometry
from fastloader.decode.orientation import Turns
from fastloader.decode.pixels import PixelProgram
from fastloader.errors import CorruptRecordError, DecodeError, FastloaderError
from fastloader.format.dataset import PackedDataset
from fastloader.gpu.planar import PlanarSpec
from fastloader.loader.images.batch_transform import transform_planar, transform_slot
from fastloader.loader.images.masks import MaskBatches
from fastloader.loader.images.pixels import PixelPlan, program_row, sample_keys
from fastloader.loader.pipeline.autotune import Setting
from fastloader.loader.pipeline.memory import BatchRing
from fastloader.loader.pipeline.producer import StageError
from fastloader.loader.pipeline.skips import RAISE_FIX, SkipBudget, no_replacement, replacements
from fastloader.loader.pipeline.stats import Counters, Timer

log = logging.getLogger(__name__)  # a child of the "fastloader" logger


@dataclass(frozen=True)
class EpochPlan:
    """What one pass produces: this rank's index order, cut into batches from `start`.

    Batches are numbered in the epoch: `indices` begins with batch `first` (0, unless the
    pass resumes a checkpoint of another shape: loader/order/resume.py)."""

    indices: np.ndarray
    batch_size: int
    num_batches: int
    start: int
    epoch: int
    seed: int
    rank: int
    first: int = 0
    world: int = 1  # the ranks of the pass: each sample's pixel-program key (images/pixels)

    def keys(self, b: int, count: int) -> np.ndarray:
        """The pixel-program keys of batch b's `count` samples (loader/images/pixels.py)."""
        return sample_keys(b, self.batch_size, count, self.world, self.rank)

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
    program: PixelProgram | None = None  # the pixel program the consumer runs on the device


@dataclass(frozen=True)
class PreparedImages:
    """A batch read and planned, waiting for a ring slot and the decoder."""

    samples: np.ndarray
    records: list[memoryview | bytes]
    failures: dict[int, FastloaderError]
    geometry: Geometry
    tiles: Any  # the batch's restart-tile tables (TileBatch), None for an untiled dataset
    masks: dict[str, torch.Tensor] | None = None
    program: PixelProgram | None = None  # the samples' pixel ops (images/pixels.py)


def _planar_kwargs(spec: PlanarSpec | None, images: torch.Tensor | None, start: int,
                   stop: int) -> dict[str, Any]:
    """decode_into's arguments for writing images[start:stop] channel-first, if asked."""
    if spec is None or images is None:
        return {}
    return spec.decode_kwargs(images[start:stop])


class ImageBatches:
    """The batches of one pass over an EpochPlan, for the producer: read, plan, decode."""

    read_ahead = True  # records read and crops planned on the helper while a batch decodes

    def __init__(
        self,
        dataset: PackedDataset,
        transforms: Sequence[Transform],
        decoder: BatchDecoder,
        ring: BatchRing,
        counters: Counters,
        on_error: str,
        epoch_plan: EpochPlan,
        planar: PlanarSpec | None = None,
        max_skips: int | float | None = None,
        batch_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        box_field: str | None = None,
        masks: MaskBatches | None = None,
        turns: Turns | None = None,
        pixels: PixelPlan | None = None,
    ) -> None:
        self.dataset = dataset
        self.pixels = pixels if pixels is not None else PixelPlan((), False)
        # how the images are shown: crops planned on these shapes (EXIF orientation applied?)
        self.turns = turns if turns is not None else Turns(dataset.stored_shapes, None)
        self.box_field = box_field  # the boxes column RandomIoUCrop plans from, if any
        self.masks = masks  # mask fields built on the helper thread with each batch's plan
        self.budget = SkipBudget(max_skips, len(epoch_plan.indices))
        self.batch_transform = batch_transform
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

    @property
    def batches(self) -> range:
        """The numbers of the pass's batches."""
        return range(self.plan.start, self.plan.num_batches)

    def apply(self, setting: Setting, slots: int) -> None:
        """The tuner's decode threads; as many recycled planar outputs as batches in flight."""
        if self.decoder.num_threads != setting.threads:
            self.decoder.num_threads = setting.threads
        if self.planar is not None:
            self.planar.pool.reserve(slots + 1)

    def prepare(self, b: int) -> PreparedImages:
        """Read and plan batch b (on the helper thread, while the previous batch decodes)."""
        samples = self.plan.batch(b).copy()
        records, failures, tiles = self._read_batch(b, samples)
        try:
            with Timer(self.counters, "plan"):
                rng = batch_rng(self.plan.seed, self.plan.epoch, b, self.plan.rank)
                geometry = self._plan(samples, rng)
                program = self.pixels.draw((self.plan.seed, self.plan.epoch),
                                           self.plan.keys(b, len(samples)), 0, geometry.size)
        except Exception as exc:
            raise StageError("plan", b) from exc
        masks = None
        if self.masks is not None:
            try:
                with Timer(self.counters, "plan"):  # the spatial fields' share of the plan
                    masks = self.masks.build(samples, geometry)
            except Exception as exc:
                raise StageError("masks", b) from exc
        return PreparedImages(samples, records, failures, geometry, tiles, masks, program)

    def _read_batch(self, b: int, samples: np.ndarray
                    ) -> tuple[list[memoryview | bytes], dict[int, FastloaderError], Any]:
        """Batch b's records (zero-copy), the reads that failed, and its tile tables."""
        try:
            with Timer(self.counters, "read"):
                records, failures = self._read(samples)
                return records, failures, self.dataset.tile_batch(samples)
        except Exception as exc:
            raise StageError("read", b) from exc

    def _plan(self, samples: np.ndarray, rng: np.random.Generator,
              transforms: Sequence[Transform] | None = None) -> Geometry:
        """The samples' geometry by `transforms` (None: the loader's); RandomIoUCrop reads
        their boxes from the dataset's column."""
        columns = self.dataset.columns  # a boxes field lives in a v2 dataset's columns
        boxes = (None if self.box_field is None or columns is None
                 else columns.gather_arrays(self.box_field, samples))
        geometry = plan_geometry(self.transforms if transforms is None else transforms,
                                 self.turns.shapes[samples], rng,
                                 self.turns.boxes(samples, boxes))
        return self.turns.attach(geometry, samples)

    def fill(self, b: int, slot: int | None, prepared: PreparedImages) -> ReadyBatch:
        """Decode prepared batch b into `slot`, repairing or reporting bad samples."""
        assert slot is not None  # the images' producer always has a ring
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
                                              **self.pixels.fused(prepared.program),
                                              **_planar_kwargs(spec, target, 0, len(samples)))
            for k, message in enumerate(errors):
                if message is not None and k not in failures:
                    failures[k] = DecodeError(f"{self.dataset.describe(samples[k])}: {message}")
            for k, error in sorted(failures.items()):
                samples[k], replacement = self._recover(b, k, int(samples[k]), error, out,
                                                        spec, target, program_row(
                                                            prepared.program, k))
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
                          prepared.masks, self.pixels.on_device_program(prepared.program))

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

    def _skip(self, b: int, k: int, sample: int, error: FastloaderError) -> str:
        """on_error="raise": raise `error`, saying where. "skip": count, log and spend the
        budget for the bad sample; return its description."""
        if self.on_error == "raise":
            raise type(error)(f"{error} (batch {b}, position {k}). {RAISE_FIX}") from error
        description = self.dataset.describe(sample)
        self.counters.add_skip(description)
        log.warning("on_error='skip': %s (batch %d, position %d) replaced: %s",
                    description, b, k, error)
        self.budget.spend(description)
        return description

    def _candidates(self, b: int, k: int, sample: int
                    ) -> Iterator[tuple[int, memoryview | bytes, np.random.Generator]]:
        """The replacements for batch b's position k, in turn: (index, record, generator),
        those whose record cannot be read passed over."""
        key = (self.plan.seed, self.plan.epoch, b, self.plan.rank, k)
        for candidate, rng in replacements(sample, len(self.dataset), key):
            try:
                yield candidate, self.dataset.record(candidate), rng
            except CorruptRecordError:
                continue

    def _recover(self, b: int, k: int, sample: int, error: FastloaderError,
                 out: np.ndarray, spec: PlanarSpec | None, images: torch.Tensor | None,
                 program: PixelProgram | None = None) -> tuple[int, Geometry]:
        """on_error="raise": raise. "skip": decode a replacement into out[k], return its index
        and its one-sample geometry.

        Replacements are the next records after the bad one (sample+1, sample+2, ...), planned
        from a generator keyed by (seed, epoch, batch, rank, position, attempt): deterministic.
        """
        description = self._skip(b, k, sample, error)
        for candidate, record, rng in self._candidates(b, k, sample):
            geometry = self._plan(np.array([candidate]), rng)
            tiles = self.dataset.tile_batch([candidate])
            if self.decoder.decode_into([record], geometry.crops, geometry.flips,
                                        out[k : k + 1], tiles, places=geometry.places,
                                        fill=geometry.fill, orientations=geometry.orientations,
                                        **self.pixels.fused(program),
                                        **_planar_kwargs(spec, images, k, k + 1))[0] is None:
                log.info("replacement for %s: record %d", description, candidate)
                return candidate, geometry
        raise no_replacement(str(error))
