"""The mask kind: a uint8 [H, W] label image the size of the sample's first image, stored as a
compressed blob of runs (format/masks.py); in a batch a uint8 [B, H, W] tensor mapped through
each sample's crop plan with nearest neighbour (decode/masks.py) by the producer's helper
thread (loader/images/masks.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np

from fastloader.decode.masks import map_mask, map_runs
from fastloader.format.kinds.base import Bad, BadValue, Batch, Kind, RecordImage, Spec, StoreContext
from fastloader.format.masks import MaskError, decode_mask, encode_mask, mask_runs, to_mask

if TYPE_CHECKING:
    import torch



class MaskKind(Kind):
    """A label image: PNG bytes or path, or a uint8 / small-int [H, W] array."""

    verified = True
    cell_is_path = True

    def describe(self, spec: Spec) -> str:
        return "mask uint8 [H, W]"

    def store(self, spec: Spec, value: object, ctx: StoreContext) -> np.ndarray:
        """The uint8 [H, W] array; stored by fit_image once its image's size is known."""
        try:
            return to_mask(value, ctx.read_file)
        except MaskError as exc:
            raise BadValue(str(exc)) from None
        except ValueError as exc:  # read_file: over the size cap, not a regular file
            # only a path is read: value is one here
            path = os.fspath(cast("str | os.PathLike[str]", value))
            raise BadValue(f"{path!r}: {exc}") from None

    def fit_image(self, spec: Spec, value: np.ndarray, image: RecordImage
                  ) -> tuple[np.ndarray | bytes, str | None]:
        """Checked against its image's size and encoded (resized with the image when --max-side
        re-encoded it)."""
        size = image.source_size() if image.reencoded else (image.height, image.width)
        if tuple(value.shape) != size:
            return value, (f"field {spec.name!r} (mask) is {value.shape[0]} x {value.shape[1]} "
                           f"(H x W) but its image is {size[0]} x {size[1]}; a mask has its "
                           "image's size")
        if image.reencoded:
            # nearest neighbour at output pixel centres, as the loader maps masks
            whole = np.array([0, 0, value.shape[0], value.shape[1]])
            value = map_mask(value, whole, False, (image.height, image.width))
        return encode_mask(value), None

    def from_member(self, spec: Spec, member: object, read: Callable[[object], bytes],
                    deferred: bool) -> object:
        return member  # a path or the PNG's bytes: read by store() in the worker

    def load(self, spec: Spec, blob: np.ndarray, shape: np.ndarray | None, fail: Bad
             ) -> np.ndarray:
        try:
            return decode_mask(blob.tobytes())
        except MaskError as exc:
            raise fail(f"mask field {spec.name!r}: {exc}") from None

    def verify(self, spec: Spec, value: np.ndarray, image_size: tuple[int, int],
               decode: Callable[[bytes], str | None] | None) -> str | None:
        height, width = image_size
        if value.shape != (height, width):
            return (f"mask is {value.shape[0]} x {value.shape[1]} but its image is "
                    f"{height} x {width}")
        return None

    def collate(self, spec: Spec, batch: Batch, indices: np.ndarray,
                device: torch.device) -> torch.Tensor:
        return batch.mask(spec.name, device)

    def map_into(self, blob: np.ndarray, image_size: tuple[int, int], crop: np.ndarray, flip: bool,
                 out: np.ndarray, orientation: int = 1) -> None:
        """A stored mask mapped through one sample's crop and flip into out (its output size),
        turned first by its image's EXIF orientation (image_size: the stored size); ValueError
        (MaskError too) if damaged or not its image's size."""
        values, lengths, height, width = mask_runs(blob.data)  # the bytes, as a memoryview
        image_h, image_w = image_size
        if height != image_h or width != image_w:
            # verify finds these too; never map a mask onto an image of another size
            raise ValueError(f"it is {height} x {width} but its image is "
                             f"{int(image_h)} x {int(image_w)}")
        map_runs(values, lengths, (height, width), crop, flip, out, orientation)
