"""Mask fields of a batch: decoded and moved through the batch's crop plan off the consumer.

The producer's helper thread (which reads and plans batch b + 1 while batch b decodes) calls
`MaskBatches.build` with the planned crops, flips and output size; each mask field becomes a
uint8 [B, H, W] tensor (page-locked when the loader's device is CUDA, so the consumer's copy is
a non_blocking one). A sample replaced under on_error="skip" brings its own crop: `replace`
redoes its row. Decoding (zlib inflate, np.repeat) and the nearest-neighbour gathers
(np.take) release the GIL for their bulk, so this runs beside the decode threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fastloader.decode.masks import map_mask
from fastloader.errors import CorruptRecordError

Geometry = tuple[np.ndarray, np.ndarray, tuple[int, int]]  # crops, flips, (out_h, out_w)


class MaskBatches:
    """Builds the mask fields' batches of a dataset.

    Args:
        dataset: the open PackedDataset.
        names: the mask fields to build (those the loader yields).
        pin: allocate page-locked tensors (the loader's device is CUDA).
    """

    def __init__(self, dataset: Any, names: Sequence[str], pin: bool) -> None:
        self.dataset = dataset
        self.names = list(names)
        self.pin = pin

    def build(self, samples: np.ndarray, geometry: Geometry) -> dict[str, torch.Tensor]:
        """Each mask field of the batch's samples as uint8 [B, out_h, out_w] (CPU tensors)."""
        crops, flips, (out_h, out_w) = geometry
        batches = {}
        for name in self.names:
            batch = torch.empty((len(samples), out_h, out_w), dtype=torch.uint8,
                                pin_memory=self.pin)
            out = batch.numpy()
            for k, i in enumerate(samples.tolist()):
                self._one(name, i, crops[k], bool(flips[k]), out[k])
            batches[name] = batch
        return batches

    def replace(self, batches: dict[str, torch.Tensor], k: int, sample: int, crop: np.ndarray,
                flip: bool) -> None:
        """Row k redone for a replacement sample decoded with its own crop and flip."""
        for name, batch in batches.items():
            self._one(name, sample, crop, flip, batch.numpy()[k])

    def _one(self, name: str, i: int, crop: np.ndarray, flip: bool, out: np.ndarray) -> None:
        columns = self.dataset.columns
        where = self.dataset.describe(i)
        mask = columns.mask(name, columns.blob(name, i), where)
        height, width = (int(v) for v in self.dataset.shapes[i])
        if mask.shape != (height, width):  # verify finds these too; never map a wrong size
            raise CorruptRecordError(
                f"{where}: mask field {name!r} is {mask.shape[0]} x {mask.shape[1]} but its "
                f"image is {height} x {width}; run `packdata verify {self.dataset.root}` and "
                "pack it again.")
        map_mask(mask, crop, flip, out.shape, out)
