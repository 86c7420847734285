"""The packed loader's consumer side of a decoded batch: its images (one batch, or a batch a view)
through the copy step (gpu/device.DeviceStep), the pixel program on the device when it runs there
(gpu/pixel_program.apply_program_torch: one launch per op, per-sample parameters), then the
device ops and normalize (`after_copy`), each view with the batch's generator; the ring slot
is given back with the last copy's event (one side stream: it follows every view's copy)."""

from __future__ import annotations

from typing import Any

import torch

from fastloader.decode.geometry import Geometry
from fastloader.decode.pixels import PixelProgram
from fastloader.gpu.device import DeviceStep
from fastloader.gpu.ops import GpuCompose, gpu_rng
from fastloader.gpu.pixel_program import apply_program_torch
from fastloader.loader.images.batches import ReadyBatch
from fastloader.loader.images.collate import Views
from fastloader.loader.images.views import ReadyViews, ViewLayout
from fastloader.loader.pipeline.memory import BatchRing

Seeds = tuple[int, int, int, int]  # (seed, epoch, batch, rank): the batch's device generator
Plan = Geometry | list[Geometry] | None  # what the collator maps boxes and masks by
MaskArg = dict[str, torch.Tensor] | list[dict[str, torch.Tensor]] | None


class BatchOutputs:
    """Turns a ready batch in its ring slot into (images, labels, plan, masks) for the
    collator: images a tensor, or Views (a tensor a view) with `layout`."""

    def __init__(self, step: DeviceStep, after_copy: GpuCompose | None,
                 layout: ViewLayout | None) -> None:
        self.step = step
        self.after_copy = after_copy
        self.layout = layout

    def __call__(self, ring: BatchRing, item: ReadyBatch | ReadyViews, seeds: Seeds
                 ) -> tuple[torch.Tensor | Views, torch.Tensor, Plan, MaskArg]:
        if isinstance(item, ReadyViews):
            return self._views(ring, item, seeds)
        images, labels, event = self.step(ring.view(item.slot, item.count)[0], item.labels,
                                          item.images)
        ring.release(item.slot, event)
        images, labels = self._after(images, labels, item.program, seeds)
        return images, labels, item.geometry, item.masks

    def _views(self, ring: BatchRing, item: ReadyViews, seeds: Seeds
               ) -> tuple[Views, torch.Tensor, Plan, MaskArg]:
        assert self.layout is not None  # a views filler always comes with its layout
        views = Views()
        event: Any = None
        labels = torch.empty(0)
        hosts = self.layout.tensors(ring, item.slot, item.count)
        for v, host in enumerate(hosts):
            planar = None if item.images is None else item.images[v]
            images, labels, event = self.step(host, item.labels, planar)
            views.append(self._after(images, labels, item.programs[v], seeds)[0])
        ring.release(item.slot, event)
        return views, labels, item.geometries, item.masks

    def _after(self, images: torch.Tensor, labels: torch.Tensor,
               program: PixelProgram | None, seeds: Seeds
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The pixel program on the device (when it runs there), then the device ops."""
        if program is None and self.after_copy is None:
            return images, labels
        with self.step.on_device():
            if program is not None:
                images = apply_program_torch(images, program)
            if self.after_copy is not None:
                images, labels = self.after_copy(images, labels, gpu_rng(*seeds))
        return images, labels
