"""Further image fields of a v2 dataset (a mask, a second view): decoded per batch with the
loader's transforms, drawing their own crops and flips, into uint8 (B, 3, H, W) tensors.

The first image field goes through the producer's fused pipeline; these run on the consumer's
thread with their own decoder (one thread per batch, the producer keeps its pool), so each costs
about what a single-threaded decode of its images costs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fastloader.decode.augment import Transform, plan_geometry
from fastloader.decode.decode import BatchDecoder, header
from fastloader.errors import DecodeError, FastloaderError


class ExtraImages:
    """Decodes one further image field's batch with the loader's transforms."""

    def __init__(self, transforms: Sequence[Transform], backend: str) -> None:
        self.transforms = list(transforms or [])
        self._decoder = BatchDecoder(1, backend)

    def decode(self, name: str, records: list[bytes], indices: np.ndarray,
               rng: np.random.Generator, device: torch.device) -> torch.Tensor:
        """uint8 (B, 3, H, W) of records; DecodeError naming the sample and field if one fails."""
        shapes = np.zeros((len(records), 2), np.int64)
        for k, data in enumerate(records):
            try:
                head = header(data)
            except FastloaderError as exc:
                raise DecodeError(f"sample {int(indices[k])}: image field {name!r}: "
                                  f"{exc}") from None
            shapes[k] = (head.height, head.width)
        # RandomIoUCrop sees no boxes here (they belong to the first image): random crops
        geometry = plan_geometry(self.transforms, shapes, rng, [np.zeros((0, 4))] * len(shapes))
        out = np.empty((len(records), *geometry.size, 3), np.uint8)
        errors = self._decoder.decode_into(records, geometry.crops, geometry.flips, out,
                                           places=geometry.places, fill=geometry.fill)
        for k, message in enumerate(errors):
            if message is not None:
                raise DecodeError(f"sample {int(indices[k])}: image field {name!r}: {message}")
        return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous().to(device)

    def close(self) -> None:
        """Stop the decoder's thread."""
        self._decoder.close()
