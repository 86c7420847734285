"""Views' side of the producer: ViewBatches reads each batch's records once, plans every view's
crops and pixel program (on the helper thread), and has the decoder write every view of a sample
from its one decode (decode/decode.BatchDecoder.decode_views_into) into the view's region of the
ring slot.

A slot holds the views back to back (ViewLayout): view v's region is batch_size x H_v x W_v x 3
bytes, so one page-locked buffer, one copy event and one free list serve every view. View v of
batch b is planned from its own generator of (seed, epoch, b, rank, v) (view 0's is the batch's
own, batch_rng: one View gives the crops transforms= would), its pixel program from (seed,
epoch, key, v) (loader/images/pixels.py): the thread count and a resume never change them. A
sample that fails is raised, or (on_error="skip") replaced in every view by the next good record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastloader.decode.augment import Transform, batch_rng
from fastloader.decode.decode import BatchDecoder
from fastloader.decode.geometry import Geometry
from fastloader.decode.orientation import Turns
from fastloader.decode.pixels import PixelProgram
from fastloader.errors import DecodeError, FastloaderError
from fastloader.format.dataset import PackedDataset
from fastloader.gpu.planar import PlanarSpec
from fastloader.loader.images.batches import EpochPlan, ImageBatches, log
from fastloader.loader.images.masks import MaskBatches
from fastloader.loader.images.pixels import PixelPlan, fused_programs, program_row
from fastloader.loader.pipeline.autotune import Setting
from fastloader.loader.pipeline.memory import BatchRing
from fastloader.loader.pipeline.producer import StageError
from fastloader.loader.pipeline.skips import no_replacement
from fastloader.loader.pipeline.stats import Counters, Timer

Masks = dict[str, torch.Tensor]


def view_rng(seed: int, epoch: int, batch: int, rank: int, view: int) -> np.random.Generator:
    """The generator of view `view`'s crops and flips in a batch: view 0's is the batch's own
    (batch_rng), so a single view plans what transforms= plans."""
    if view == 0:
        return batch_rng(seed, epoch, batch, rank)
    return np.random.default_rng([seed, epoch, batch, rank, 0, view])


@dataclass(frozen=True)
class ViewSpec:
    """One view as the filler takes it (a View, `count` expanded): transforms and pixel ops."""

    transforms: tuple[Transform, ...]
    pixels: PixelPlan


@dataclass(frozen=True)
class ViewLayout:
    """Where each view's batch lies in a ring slot: back to back, (batch_size, H_v, W_v, 3)."""

    sizes: tuple[tuple[int, int], ...]
    batch_size: int

    def _spans(self) -> list[int]:
        """Each view's bytes in a slot."""
        return [self.batch_size * h * w * 3 for h, w in self.sizes]

    def region(self, v: int) -> tuple[int, int]:
        """(start, bytes) of view v's region of a slot."""
        spans = self._spans()
        return sum(spans[:v]), spans[v]

    @property
    def slot_bytes(self) -> int:
        """The bytes of one slot: every view's batch."""
        return sum(self._spans())

    def ring(self, slots: int, pin: bool, capacity: int | None) -> BatchRing:
        """A ring whose slots hold every view of a batch."""
        return BatchRing.of_bytes(slots, self.slot_bytes, pin, capacity)

    def arrays(self, ring: BatchRing, slot: int, count: int) -> list[np.ndarray]:
        """The first `count` images of each view in `slot`, as (count, H_v, W_v, 3) arrays."""
        return [t.numpy() for t in self.tensors(ring, slot, count)]

    def tensors(self, ring: BatchRing, slot: int, count: int) -> list[torch.Tensor]:
        """The first `count` images of each view in `slot`, as (count, H_v, W_v, 3) tensors
        (page-locked with CUDA), for the decode and the copy step."""
        flat = ring.buffers[slot].reshape(-1)
        out = []
        for v, (h, w) in enumerate(self.sizes):
            start, _ = self.region(v)
            out.append(flat[start:start + count * h * w * 3].view(count, h, w, 3))
        return out


@dataclass(frozen=True)
class PreparedViews:
    """A batch read and every view planned, waiting for a ring slot and the decoder."""

    samples: np.ndarray
    records: list[memoryview | bytes]
    failures: dict[int, FastloaderError]
    geometries: list[Geometry]
    tiles: Any
    programs: list[PixelProgram | None]
    masks: list[Masks] | None = None


@dataclass(frozen=True)
class ReadyViews:
    """A decoded batch of views waiting in its ring slot."""

    index: int
    slot: int
    count: int
    labels: np.ndarray
    samples: np.ndarray
    images: list[torch.Tensor] | None  # each view's channel-first tensor (CPU target)
    geometries: list[Geometry]
    masks: list[Masks] | None
    programs: list[PixelProgram | None]  # each view's program the consumer runs on the device


class ViewBatches(ImageBatches):
    """The batches of one pass with several views a sample: read once, plan, decode once."""

    def __init__(self, dataset: PackedDataset, views: Sequence[ViewSpec], layout: ViewLayout,
                 decoder: BatchDecoder, ring: BatchRing, counters: Counters, on_error: str,
                 epoch_plan: EpochPlan, planar: PlanarSpec | None = None,
                 max_skips: int | float | None = None, box_field: str | None = None,
                 masks: MaskBatches | None = None, turns: Turns | None = None) -> None:
        super().__init__(dataset, (), decoder, ring, counters, on_error, epoch_plan, planar,
                         max_skips, None, box_field, masks, turns)
        self.views = tuple(views)
        self.layout = layout
        if planar is not None:  # a channel-first tensor a view of every batch in flight
            planar.pool.reserve((ring.slots + 1) * len(self.views))

    def apply(self, setting: Setting, slots: int) -> None:
        """The tuner's decode threads; recycled planar outputs for every view in flight."""
        super().apply(setting, slots)
        if self.planar is not None:
            self.planar.pool.reserve((slots + 1) * len(self.views))

    def prepare(self, b: int) -> PreparedViews:  # type: ignore[override]
        """Read batch b once and plan every view (on the helper thread)."""
        samples = self.plan.batch(b).copy()
        records, failures, tiles = self._read_batch(b, samples)
        try:
            with Timer(self.counters, "plan"):
                geometries, programs = self._plan_views(b, samples)
        except Exception as exc:
            raise StageError("plan", b) from exc
        masks = None
        if self.masks is not None:
            try:
                with Timer(self.counters, "plan"):
                    masks = [self.masks.build(samples, g) for g in geometries]
            except Exception as exc:
                raise StageError("masks", b) from exc
        return PreparedViews(samples, records, failures, geometries, tiles, programs, masks)

    def _plan_views(self, b: int, samples: np.ndarray
                    ) -> tuple[list[Geometry], list[PixelProgram | None]]:
        plan = self.plan
        keys = plan.keys(b, len(samples))
        geometries, programs = [], []
        for v, view in enumerate(self.views):
            rng = view_rng(plan.seed, plan.epoch, b, plan.rank, v)
            geometry = self._plan(samples, rng, view.transforms)
            geometries.append(geometry)
            programs.append(view.pixels.draw((plan.seed, plan.epoch), keys, v, geometry.size))
        return geometries, programs

    def fill(self, b: int, slot: int | None, prepared: PreparedViews  # type: ignore[override]
             ) -> ReadyViews:
        """Decode prepared batch b's views into `slot`, repairing or reporting bad samples."""
        assert slot is not None
        samples, failures = prepared.samples, prepared.failures
        count = len(samples)
        outs = self.layout.arrays(self.ring, slot, count)
        images = ([self.planar.allocate(count, h, w) for h, w in self.layout.sizes]
                  if self.planar is not None else None)
        geometries = list(prepared.geometries)
        with Timer(self.counters, "decode"):
            errors = self.decoder.decode_views_into(
                prepared.records, _crops(geometries), _flips(geometries), outs,
                prepared.tiles, orientations=geometries[0].orientations,
                **fused_programs([v.pixels for v in self.views], prepared.programs),
                **self._planar_views(images, 0, count))
            for k, message in enumerate(errors):
                if message is not None and k not in failures:
                    failures[k] = DecodeError(f"{self.dataset.describe(samples[k])}: {message}")
            for k, error in sorted(failures.items()):
                samples[k], replaced = self._recover_views(b, k, int(samples[k]), error, outs,
                                                           images, prepared.programs)
                geometries = [g.with_sample(k, r) for g, r in zip(geometries, replaced,
                                                                   strict=True)]
                if prepared.masks is not None and self.masks is not None:
                    for batch, geometry in zip(prepared.masks, geometries, strict=True):
                        self.masks.replace(batch, k, int(samples[k]), geometry)
        labels = np.asarray(self.dataset.labels[samples], dtype=np.int64)
        device = [view.pixels.on_device_program(p)
                  for view, p in zip(self.views, prepared.programs, strict=True)]
        return ReadyViews(b, slot, count, labels, samples, images, geometries, prepared.masks,
                          device)

    def _planar_views(self, images: list[torch.Tensor] | None, start: int, stop: int
                      ) -> dict[str, Any]:
        """decode_views_into's planars/scale/shift for rows start:stop of every view."""
        if self.planar is None or images is None:
            return {}
        return {"planars": [t[start:stop].numpy() for t in images], "scale": self.planar.scale,
                "shift": self.planar.shift}

    def _recover_views(self, b: int, k: int, sample: int, error: FastloaderError,
                       outs: list[np.ndarray], images: list[torch.Tensor] | None,
                       programs: list[PixelProgram | None]) -> tuple[int, list[Geometry]]:
        """on_error="raise": raise. "skip": decode a replacement into row k of every view;
        return its index and its one-sample geometry a view. Its views are planned from
        generators drawn from replacements()' (deterministic); it keeps row k's programs."""
        description = self._skip(b, k, sample, error)
        rows = [program_row(p, k) for p in programs]
        for candidate, record, rng in self._candidates(b, k, sample):
            one = np.array([candidate])
            seeds = rng.integers(0, 2**63 - 1, size=len(self.views))
            geometries = [self._plan(one, np.random.default_rng(seed), view.transforms)
                          for view, seed in zip(self.views, seeds.tolist(), strict=True)]
            if self.decoder.decode_views_into(
                    [record], _crops(geometries), _flips(geometries),
                    [out[k:k + 1] for out in outs], self.dataset.tile_batch([candidate]),
                    orientations=geometries[0].orientations,
                    **fused_programs([v.pixels for v in self.views], rows),
                    **self._planar_views(images, k, k + 1))[0] is None:
                log.info("replacement for %s: record %d", description, candidate)
                return candidate, geometries
        raise no_replacement(str(error))


def _crops(geometries: Sequence[Geometry]) -> np.ndarray:
    """int32 [N, V, 4]: each sample's crop in each view."""
    return np.ascontiguousarray(np.stack([g.crops for g in geometries], axis=1), np.int32)


def _flips(geometries: Sequence[Geometry]) -> np.ndarray:
    """bool [N, V]: each sample's flip in each view."""
    return np.ascontiguousarray(np.stack([g.flips for g in geometries], axis=1), bool)
