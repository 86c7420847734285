"""The image kind: an encoded image per sample (JPEG, PNG, ...). The first image field is the
dataset's records (the shards, decoded by the fused path); a further one is a bytes column,
decoded per batch with the loader's transforms (loader/extra_images.py) or given as bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from fastloader.format.kinds.base import BadValue, Batch, Kind, Spec, StoreContext

if TYPE_CHECKING:
    import torch



class ImageKind(Kind):
    """Encoded image bytes, checked to decode when packed."""

    is_image = True
    records = True
    verified = True  # read back, and decoded with `packdata verify --decode`
    cell_is_path = True

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> bytes:
        data = ctx.read(value)
        problem = ctx.check_image(data)
        if problem is not None:
            raise BadValue(problem)
        return data

    def from_member(self, spec: Spec, member: object, read: Callable[[object], bytes],
                    deferred: bool) -> object:
        return member if deferred else read(member)

    def verify(self, spec: Spec, value: bytes, image_size: tuple[int, int],
               decode: Callable[[bytes], str | None] | None) -> str | None:
        return None if decode is None else decode(value)

    def collate(self, spec: Spec, batch: Batch, indices: np.ndarray,
                device: torch.device) -> list[bytes] | torch.Tensor:
        records = batch.values(spec.name, indices)
        decoded = batch.decode_images(spec.name, records, indices, device)
        return records if decoded is None else decoded
