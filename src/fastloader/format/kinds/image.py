"""The image kind: an encoded image per sample (JPEG, PNG, ...). The first image field is the
dataset's records (the shards, decoded by the fused path); a further one is a bytes column,
decoded per batch with the loader's transforms (loader/images/extra_images.py) or given as bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from fastloader.errors import FastloaderError
from fastloader.format.kinds.base import BadValue, Batch, Kind, Spec, StoreContext

if TYPE_CHECKING:
    import torch



class ImageKind(Kind):
    """Encoded image bytes, checked to decode when packed."""

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

    def decode_problem(self, data: bytes | memoryview, shape: tuple[int, int]) -> str | None:
        """Decoded as the loader does (its decoder, its rules: the native core when built, where
        a libjpeg warning that damages pixels is an error), at 1/8 scale: every scan is still
        entropy-decoded, so damage anywhere in the data is found."""
        from fastloader.decode import decode as decoder

        try:
            hdr = decoder.header(data)
            if (hdr.height, hdr.width) == shape:
                decoder.decode(data, size=decoder.check_size(hdr.height, hdr.width))
        except FastloaderError as exc:  # DecodeError, or a bomb/argument refusal of the header
            return f"does not decode with the loader's decoder ({exc})"
        if (hdr.height, hdr.width) != shape:
            return f"decodes to {hdr.height}x{hdr.width}, the index says {shape[0]}x{shape[1]}"
        return None

    def collate(self, spec: Spec, batch: Batch, indices: np.ndarray,
                device: torch.device) -> list[bytes] | torch.Tensor:
        records = batch.values(spec.name, indices)
        decoded = batch.decode_images(spec.name, records, indices, device)
        return records if decoded is None else decoded
