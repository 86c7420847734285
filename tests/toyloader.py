"""The toy loader (tests/toyoutput.py's): each batch, the byte lengths of its records (plus the
Toy's offset), in order. Defining it registers its path with FastLoader."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from fastloader.format.open import dataset_from
from fastloader.loader.factory.arguments import options_from
from fastloader.loader.factory.base import FastLoader
from toyoutput import ToyOptions


class ToyLoader(FastLoader, path="toy loader"):
    def __init__(self, data: object, *args: object, **kwargs: object) -> None:
        options = options_from(ToyOptions, "toy loader", args, kwargs)[0]
        assert options.toy is not None  # ToyOptions checks it
        self.batch_size, self.drop_last, self.offset = (options.batch_size, options.drop_last,
                                                        options.toy.offset)
        self.dataset, self._owns = dataset_from(data, "a packed dataset (path or PackedDataset)")
        self._built()

    def __iter__(self) -> Iterator[torch.Tensor]:
        n = len(self.dataset)
        for start in range(0, n, self.batch_size):
            rows = range(start, min(n, start + self.batch_size))
            yield torch.tensor([len(self.dataset.record(i)) + self.offset for i in rows])

    def __len__(self) -> int:
        return -(-len(self.dataset) // self.batch_size)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._owns:
                self.dataset.close()
