"""The packed loader's remote workers (remote=fastloader.Remote(...)) started with the recipe
its batches need (images, or views=), and each pass's filler over them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from fastloader.format.dataset import PackedDataset
from fastloader.loader.factory.options import PackedOptions
from fastloader.loader.images.batches import ImageBatches, ReadyBatch
from fastloader.loader.images.pixels import PixelPlan
from fastloader.loader.images.views import ViewBatches, ViewLayout, ViewSpec
from fastloader.loader.packed.remote_images import ImageRecipe, absorber
from fastloader.loader.packed.remote_views import ViewRecipe, view_absorber
from fastloader.loader.remote.cluster import WorkerPool
from fastloader.loader.remote.dispatch import RemoteBatches


def start_pool(options: PackedOptions, dataset: PackedDataset, image_size: tuple[int, int],
               box_field: str | None, mask_fields: Sequence[str], planar: bool,
               pixels: PixelPlan, views: Sequence[ViewSpec] = (),
               layout: ViewLayout | None = None) -> WorkerPool | None:
    """The loader's workers, started (None without remote=); planar: the trainer's target is
    the CPU, whose output is channel-first; pixels: the pixel ops and where they run; views and
    layout: views= (each view as the filler takes it, and the ring slot's layout)."""
    remote = options.remote
    if remote is None:
        return None
    common = (dataset, tuple(options.decode_transforms), options.backend,
              options.apply_exif_orientation, box_field, tuple(mask_fields), options.on_error,
              options.batch_size, image_size, remote.threads, planar, pixels)
    recipe = (ImageRecipe(*common) if layout is None
              else ViewRecipe(*common, views=tuple(views), layout=layout))
    return WorkerPool(remote, recipe)


def remote_filler(pool: WorkerPool | None, batches: ImageBatches
                  ) -> ImageBatches | RemoteBatches[Any, ReadyBatch]:
    """The pass's filler: the local one, or the local one and the workers together."""
    if pool is None:
        return batches
    absorb: Callable[[int, int | None, Any], ReadyBatch] = absorber(batches)
    if isinstance(batches, ViewBatches):  # its ReadyViews go where ViewBatches.fill's go
        absorb = cast(Callable[[int, int | None, Any], ReadyBatch], view_absorber(batches))
    return RemoteBatches(batches, absorb, pool, batches.plan, batches.batches)
