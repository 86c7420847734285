"""Mask fields of a batch: decoded and moved through the batch's crop plan off the consumer.

The producer's helper thread (which reads and plans batch b + 1 while batch b decodes) calls
`MaskBatches.build` with the batch's Geometry (crops, flips, output size and, with ResizeFit,
each crop's rectangle in the output: the mask is mapped into it and padded with 0, the
background, as the image is with its fill); each mask field becomes a
uint8 [B, H, W] tensor (page-locked when the loader's device is CUDA, so the consumer's copy is
a non_blocking one). A sample replaced under on_error="skip" brings its own crop: `replace`
redoes its row. The mask kind (format/kinds/mask.py) maps each one: its runs are inflated (zlib,
GIL released) and mapped by the extension's mask_from_runs (GIL released) or numpy's np.repeat +
np.take, so this runs beside the decode threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import torch

from fastloader.decode.geometry import Geometry
from fastloader.format.dataset import PackedDataset
from fastloader.format.kinds import Raster
from fastloader.gpu.planar import TensorPool


class MaskBatches:
    """Builds the mask fields' batches of a dataset.

    Args:
        dataset: the open PackedDataset.
        names: the mask fields to build (those the loader yields).
        pin: allocate page-locked tensors (the loader's device is CUDA).
    """

    def __init__(self, dataset: PackedDataset, names: Sequence[str], pin: bool) -> None:
        self.dataset = dataset
        self.names = list(names)
        # what maps each one: the fields' kinds, Raster (the collator's mask_fields)
        self.kinds = {name: cast(Raster, dataset.fields[name].kind) for name in self.names}
        self.pin = pin
        # CPU batches on recycled buffers: fresh ones cost a page fault per 4 KiB on first
        # touch, measured ~0.25 ms a 512x512 mask here against ~0.03 ms for the kernel itself
        # (torch's pinned allocator recycles the CUDA ones)
        self._pool = TensorPool(keep=2 * len(self.names) + 2)

    def build(self, samples: np.ndarray, geometry: Geometry) -> dict[str, torch.Tensor]:
        """Each mask field of the batch's samples as uint8 [B, out_h, out_w] (CPU tensors)."""
        out_h, out_w = geometry.size
        batches = {}
        rows = samples.tolist()
        for name in self.names:
            shape = (len(samples), out_h, out_w)
            batch = (torch.empty(shape, dtype=torch.uint8, pin_memory=True) if self.pin
                     else self._pool.tensor(shape, torch.uint8))
            out = batch.numpy()
            for k, i in enumerate(rows):
                self._placed(name, i, geometry, k, out[k])
            batches[name] = batch
        return batches

    def replace(self, batches: dict[str, torch.Tensor], k: int, sample: int,
                geometry: Geometry) -> None:
        """Row k redone for a replacement sample, decoded with geometry's row k."""
        for name, batch in batches.items():
            self._placed(name, sample, geometry, k, batch.numpy()[k])

    def _placed(self, name: str, i: int, geometry: Geometry, k: int, out: np.ndarray) -> None:
        """Sample i's mask into out by geometry's row k: the whole row, or its rectangle."""
        crop, flip, (top, left, height, width) = geometry.sample(k)
        turn = geometry.orientation(k)
        if (height, width) == out.shape:
            self._one(name, i, crop, flip, out, turn)
            return
        inner = np.empty((height, width), np.uint8)  # the kernel writes contiguous rows
        self._one(name, i, crop, flip, inner, turn)
        out.fill(0)
        out[top:top + height, left:left + width] = inner

    def _one(self, name: str, i: int, crop: np.ndarray, flip: bool, out: np.ndarray,
             orientation: int) -> None:
        columns = self.dataset.columns
        assert columns is not None  # a mask field lives in a v2 dataset's columns
        try:  # a mask is stored in its image's stored pixels, turned with it
            self.kinds[name].map_into(columns.blob(name, i), self.dataset.stored_shapes[i],
                                      crop, flip, out, orientation)
        except ValueError as exc:  # MaskError too: the stored blob is damaged
            where = self.dataset.describe(i)  # only on failure: it builds a string
            raise columns.mask_error(name, where, exc) from None
