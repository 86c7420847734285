"""A four-item map-style torch Dataset of ints, for the tests that give FastLoader a dataset
torch's DataLoader takes (the drop-in path)."""

from __future__ import annotations

import torch


class Numbers(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return i
