"""The packed loader's remote workers with views= (loader/images/views.py): an actor fills a
batch of every view of its samples from one decode of each record, as the trainer's ViewBatches
does, and the trainer copies each view into its region of the ring slot.

What crosses the wire is each view's uint8 pixels (the slot region's NHWC bytes for the CUDA
target, the channel-first batch for the CPU target), the labels, the delivered samples, each
view's geometry, masks and device-side pixel program, and the records replaced under
on_error="skip". The views' batches are planned on the worker from the same generators of
(seed, epoch, batch, rank, view) as locally, so they are the local loader's, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fastloader.decode.geometry import Geometry
from fastloader.decode.pixels import PixelProgram
from fastloader.loader.images.batches import EpochPlan
from fastloader.loader.images.views import ReadyViews, ViewBatches, ViewLayout, ViewSpec
from fastloader.loader.packed.remote_images import (
    ImageRecipe,
    ImageWork,
    planar_copy,
    take_skips,
    writable_geometry,
    writable_masks,
    writable_program,
)
from fastloader.loader.pipeline.memory import BatchRing
from fastloader.loader.pipeline.stats import Counters


@dataclass(frozen=True)
class ViewPayload:
    """One batch of views from a worker."""

    pixels: list[np.ndarray]  # each view's uint8 batch: NHWC, or channel-first (planar=True)
    labels: np.ndarray
    samples: np.ndarray
    geometries: list[Geometry]  # each view's plan of the delivered samples
    masks: list[dict[str, np.ndarray]] | None  # each view's mask fields
    skipped: tuple[str, ...]  # records replaced under on_error="skip", as described
    programs: list[PixelProgram | None]  # each view's program the trainer runs on its device


@dataclass(frozen=True)
class ViewRecipe(ImageRecipe):
    """An ImageRecipe whose batches are views= (transforms= and pixels are not used)."""

    views: tuple[ViewSpec, ...]
    layout: ViewLayout

    def __call__(self) -> ViewWork:
        return ViewWork(self)


class ViewWork(ImageWork):
    """On the actor: the loader's batches of views, one pass's ViewBatches at a time."""

    recipe: ViewRecipe

    def _ring(self) -> BatchRing:
        """One plain slot holding every view of a batch."""
        return self.recipe.layout.ring(1, False, None)

    def _filler(self, plan: EpochPlan) -> ViewBatches:
        """The local loader's views filler over this actor's one slot."""
        recipe = self.recipe
        # no skip budget here: the trainer spends its own for every record replaced
        return ViewBatches(self.dataset, recipe.views, recipe.layout, self.decoder, self.ring,
                           Counters(), recipe.on_error, plan, self.planar, None,
                           recipe.box_field, self.masks, self.turns)

    def run(self, plan: EpochPlan, b: int) -> ViewPayload:  # type: ignore[override]
        ready, skipped = self._fill(plan, b)
        pixels = (self.recipe.layout.arrays(self.ring, 0, ready.count) if ready.images is None
                  else [t.numpy() for t in ready.images])
        masks = (None if ready.masks is None
                 else [{name: t.numpy() for name, t in view.items()} for view in ready.masks])
        return ViewPayload(pixels, ready.labels, ready.samples, ready.geometries, masks,
                           skipped, ready.programs)


def view_absorber(batches: ViewBatches) -> Callable[[int, int | None, ViewPayload], ReadyViews]:
    """The trainer's side: a worker's views into batch b's ring slot, as ReadyViews."""

    def absorb(b: int, slot: int | None, payload: ViewPayload) -> ReadyViews:
        assert slot is not None  # the images' producer always has a ring
        count = len(payload.samples)
        images: list[torch.Tensor] | None = None
        if batches.planar is None:  # each view into its region of the slot
            regions = batches.layout.arrays(batches.ring, slot, count)
            for region, pixels in zip(regions, payload.pixels, strict=True):
                np.copyto(region, pixels)
        else:
            images = [planar_copy(batches, pixels) for pixels in payload.pixels]
        take_skips(batches, b, payload.skipped)
        masks = (None if payload.masks is None
                 else [writable_masks(view) or {} for view in payload.masks])
        return ReadyViews(b, slot, count, payload.labels.copy(), payload.samples.copy(), images,
                          [writable_geometry(g) for g in payload.geometries], masks,
                          [writable_program(p) for p in payload.programs])

    return absorb
