"""The packed loader's remote workers (remote=fastloader.Remote(...)): what an actor runs for a
batch of images, and how the trainer takes the result into its ring slot.

The actor opens the loader's dataset itself (a PackedDataset, a mix or a URL's dataset pickles
as its path and options), and runs the local ImageBatches on a ring of one plain slot: the same
read, plan (drawn from seed, epoch, batch and rank), masks and decode as the producer's, so a
batch is bit-equal to the local one. What crosses the wire is the uint8 NHWC pixels, the labels,
the delivered samples, the geometry (boxes follow it on the trainer), the masks and the records
replaced under on_error="skip". For the CUDA target the pixels are the slot's NHWC bytes, copied
into the trainer's (page-locked) slot; for the CPU target they are the decoder's channel-first
uint8 output (decoded fused on the worker, as the local decode writes it), which the trainer
copies, or normalizes with the fused path's arithmetic, into its output tensor, leaving the
slot alone. batch_transform runs on the trainer, as after the local decode.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastloader.decode.augment import Transform
from fastloader.decode.decode import BatchDecoder
from fastloader.decode.geometry import Geometry
from fastloader.decode.pixels import PixelProgram
from fastloader.format.dataset import PackedDataset
from fastloader.gpu.planar import PlanarSpec
from fastloader.loader.factory.options import exif_turns
from fastloader.loader.images.batch_transform import transform_planar, transform_slot
from fastloader.loader.images.batches import EpochPlan, ImageBatches, ReadyBatch
from fastloader.loader.images.masks import MaskBatches
from fastloader.loader.images.pixels import PixelPlan
from fastloader.loader.pipeline.memory import BatchRing
from fastloader.loader.pipeline.stats import Counters

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImagePayload:
    """One batch from a worker."""

    pixels: np.ndarray  # uint8 (count, H, W, 3), the slot's; channel-first for planar=True
    labels: np.ndarray
    samples: np.ndarray
    geometry: Any  # decode/geometry.Geometry of the delivered samples
    masks: dict[str, np.ndarray] | None
    skipped: tuple[str, ...]  # records replaced under on_error="skip", as described
    program: PixelProgram | None = None  # pixel ops the trainer runs on its device (else fused)


@dataclass(frozen=True)
class ImageRecipe:
    """What a worker needs to make the loader's image batches; pickled to the actor."""

    dataset: PackedDataset
    transforms: tuple[Transform, ...]
    backend: str
    apply_exif_orientation: bool | None
    box_field: str | None
    mask_fields: tuple[str, ...]
    on_error: str
    batch_size: int
    image_size: tuple[int, int]
    threads: int
    planar: bool  # the trainer's target is the CPU: send the channel-first uint8 batch
    pixels: PixelPlan  # the pixel ops in transforms=: fused on the worker, or left to the device

    def __call__(self) -> ImageWork:
        return ImageWork(self)


class ImageWork:
    """On the actor: the loader's image batches, one pass's ImageBatches at a time."""

    def __init__(self, recipe: ImageRecipe) -> None:
        self.recipe = recipe
        self.dataset = recipe.dataset
        self.decoder = BatchDecoder(recipe.threads, recipe.backend)
        self.turns = exif_turns(recipe.apply_exif_orientation, self.dataset)
        self.masks = (MaskBatches(self.dataset, recipe.mask_fields, pin=False)
                      if recipe.mask_fields else None)
        self.ring = self._ring()
        self.planar = PlanarSpec(torch.uint8) if recipe.planar else None
        self.batches: ImageBatches | None = None
        self.plan: EpochPlan | None = None

    def _ring(self) -> BatchRing:
        """One plain slot of the loader's batch."""
        return BatchRing(1, self.recipe.batch_size, *self.recipe.image_size, pin=False)

    def _for(self, plan: EpochPlan) -> ImageBatches:
        """The pass's filler, made once a pass."""
        if self.batches is None or self.plan is not plan:
            self.batches, self.plan = self._filler(plan), plan
        return self.batches

    def _filler(self, plan: EpochPlan) -> ImageBatches:
        """The local loader's filler over this actor's one slot."""
        recipe = self.recipe
        # no skip budget here: the trainer spends its own for every record replaced
        return ImageBatches(self.dataset, recipe.transforms, self.decoder, self.ring,
                            Counters(), recipe.on_error, plan, self.planar, None, None,
                            recipe.box_field, self.masks, self.turns, recipe.pixels)

    def _fill(self, plan: EpochPlan, b: int) -> tuple[Any, tuple[str, ...]]:
        """Batch b filled into the slot, and the records replaced in it under on_error="skip"."""
        batches = self._for(plan)
        skipped_before = len(batches.budget.skipped)
        ready = batches.fill(b, 0, batches.prepare(b))
        return ready, tuple(batches.budget.skipped[skipped_before:])

    def run(self, plan: EpochPlan, b: int) -> ImagePayload:
        ready, skipped = self._fill(plan, b)
        pixels = (self.ring.view(0, ready.count)[1] if ready.images is None
                  else ready.images.numpy())
        masks = (None if ready.masks is None
                 else {name: t.numpy() for name, t in ready.masks.items()})
        return ImagePayload(pixels, ready.labels, ready.samples, ready.geometry, masks,
                            skipped, ready.program)


def _writable(value: Any) -> Any:
    """An array from the object store (read-only) copied; anything else as it is."""
    return value.copy() if isinstance(value, np.ndarray) else value


def writable_geometry(geometry: Geometry) -> Geometry:
    """A geometry from the object store with its arrays copied (the store's are read-only)."""
    return dataclasses.replace(geometry, **{f.name: _writable(getattr(geometry, f.name))
                                            for f in dataclasses.fields(geometry)})


def writable_program(program: PixelProgram | None) -> PixelProgram | None:
    """A pixel program from the object store, copied (None stays None)."""
    return (None if program is None
            else PixelProgram(program.codes.copy(), program.params.copy()))


def writable_masks(masks: dict[str, np.ndarray] | None) -> dict[str, torch.Tensor] | None:
    """A batch's mask fields from the object store, as tensors of their own."""
    return None if masks is None else {n: torch.from_numpy(m.copy()) for n, m in masks.items()}


def take_skips(batches: ImageBatches, b: int, skipped: Sequence[str]) -> None:
    """The local fill's bookkeeping of records a worker replaced under on_error="skip":
    counted, logged and spent from the trainer's budget."""
    for description in skipped:
        batches.counters.add_skip(description)
        log.warning("on_error='skip': %s (batch %d) replaced on a remote worker",
                    description, b)
        batches.budget.spend(description)


def planar_copy(batches: ImageBatches, pixels: np.ndarray) -> torch.Tensor:
    """The CPU target's output tensor from a worker's channel-first uint8 batch: copied, or
    normalized with the fused decode's arithmetic (BatchDecoder.normalize_planar)."""
    spec = batches.planar
    assert spec is not None
    count, _, height, width = pixels.shape
    images = spec.allocate(count, height, width)
    if images.is_floating_point():
        batches.decoder.normalize_planar(pixels, images, scale=spec.scale, shift=spec.shift)
    else:
        np.copyto(images.numpy(), pixels)
    return images


def absorber(batches: ImageBatches) -> Any:
    """The trainer's side: a worker's payload into batch b's ring slot, as a ReadyBatch."""

    def absorb(b: int, slot: int | None, payload: ImagePayload) -> ReadyBatch:
        assert slot is not None  # the images' producer always has a ring
        count = len(payload.samples)
        images = _planar(batches, payload.pixels)  # the CPU target's output, from the payload
        if images is None:
            _, out = batches.ring.view(slot, count)
            np.copyto(out, payload.pixels)
            if batches.batch_transform is not None:
                transform_slot(batches.batch_transform, out)
        take_skips(batches, b, payload.skipped)
        return ReadyBatch(b, slot, count, payload.labels.copy(), payload.samples.copy(), images,
                          writable_geometry(payload.geometry), writable_masks(payload.masks),
                          writable_program(payload.program))

    return absorb


def _planar(batches: ImageBatches, pixels: np.ndarray) -> torch.Tensor | None:
    """The CPU target's output tensor from a worker's channel-first uint8 batch: copied, or
    normalized with the fused decode's arithmetic (BatchDecoder.normalize_planar), after
    batch_transform as the local fill runs it; None for the CUDA target (pixels go to the slot)."""
    spec = batches.planar
    if spec is None:
        return None
    if batches.batch_transform is not None:  # it may write in place: not the store's copy
        count, _, height, width = pixels.shape
        staged = torch.from_numpy(pixels.copy())
        return transform_planar(batches.batch_transform, staged,
                                spec.allocate(count, height, width), spec, batches.decoder)
    return planar_copy(batches, pixels)
