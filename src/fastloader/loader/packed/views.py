"""The packed loader's views= wiring: each View (count expanded) as the filler takes it, each view's
output size over the dataset's image sizes (the ring slot's layout), and what views or pixel ops
cannot be given with a dataset's fields."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastloader.decode.augment import output_size
from fastloader.decode.pixels import AutoAugment, RandAugment, TrivialAugmentWide
from fastloader.errors import invalid_argument
from fastloader.loader.factory.view_options import View
from fastloader.loader.images.pixels import PixelPlan
from fastloader.loader.images.views import ViewLayout, ViewSpec

# The policies whose ops move pixels (shear, translate, rotate): boxes and masks, mapped through
# the crop alone, would no longer lie on their objects.
MOVING_POLICIES = (TrivialAugmentWide, RandAugment, AutoAugment)


def view_specs(views: Sequence[View], on_device: bool) -> tuple[ViewSpec, ...]:
    """Each view (count expanded) as the filler takes it: its geometric transforms and its pixel
    ops with where they run."""
    return tuple(ViewSpec(view.geometric, PixelPlan(view.pixel_ops, on_device))
                 for view in views)


def view_layout(views: Sequence[ViewSpec], shapes: np.ndarray, batch_size: int
                ) -> ViewLayout | None:
    """The ring slot's layout of the views' batches (None without views): each view's one
    output size over the dataset's image `shapes`, or the planner's error naming it."""
    if not views:
        return None
    sizes = []
    for v, view in enumerate(views):
        try:
            sizes.append(output_size(view.transforms, shapes))
        except Exception as exc:
            raise type(exc)(f"views (view {v}): {exc}") from None
    return ViewLayout(tuple(sizes), batch_size)


def refuse_extra_images(views: Sequence[ViewSpec], names: Sequence[str]) -> None:
    """Views crop the records' image field; a further image field would need its own views."""
    if views and names:
        raise invalid_argument(
            "views", f"{len(views)} views", f"the dataset has further image fields {list(names)}, "
            "and views= crops only the records' image field", "Pass decode_images=False to "
            "have those fields as encoded bytes, or fields=[...] without them.")


def refuse_moving_policies(ops: Sequence[object], spatial: Sequence[str]) -> None:
    """A policy whose ops move pixels cannot run where boxes or masks follow the image."""
    if not spatial:
        return
    for op in ops:
        if isinstance(op, MOVING_POLICIES):
            raise invalid_argument(
                "transforms", op, f"{type(op).__name__} shears, translates and rotates "
                f"pixels, which the dataset's boxes and masks {list(spatial)} would not follow",
                "Use the colour ops (ColorJitter, RandomGrayscale, GaussianBlur, ...) with "
                "boxes and masks, or fields=[...] without those fields.")
