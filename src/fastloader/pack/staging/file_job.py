"""The per-file work of a tree pack's tasks, as a picklable job: validate (pack/sources/validate),
tile (pack/sources/tiling) or encode as coeffs (pack/staging/codec), as the settings say."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fastloader.pack.sources import tiling
from fastloader.pack.sources.validate import Prepared, prepare
from fastloader.pack.staging.codec import prepare_coded
from fastloader.pack.staging.plan import TaskSettings


def prepare_job(settings: TaskSettings) -> Callable[[str], Prepared]:
    """The per-file work of this pack (read, check, maybe re-encode, tile or encode as coeffs),
    picklable."""
    if settings.tiles is not None:
        return functools.partial(
            tiling.prepare_tiled, max_side=settings.max_side, quality=settings.quality,
            restart_mcus=settings.tiles["restart_mcus"], max_file_size=settings.max_file_size,
            storage_options=settings.storage_options,
            apply_exif_orientation=settings.apply_exif_orientation)
    limits: dict[str, Any] = {"max_side": settings.max_side, "quality": settings.quality,
                              "max_file_size": settings.max_file_size,
                              "storage_options": settings.storage_options,
                              "apply_exif_orientation": settings.apply_exif_orientation}
    if settings.codec != "jpeg":  # the JPEG pack's job stays prepare() itself
        return functools.partial(prepare_coded, codec=settings.codec, **limits)
    return functools.partial(prepare, **limits)
