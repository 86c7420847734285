"""The plain-PyTorch baseline: an ImageFolder Dataset and transforms written as torchvision does."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}


def rrc_params(
    height: int, width: int, scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """torchvision RandomResizedCrop.get_params: (top, left, height, width), torch's RNG."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect = math.exp(torch.empty(1).uniform_(log_ratio[0].item(), log_ratio[1].item()).item())
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, size=(1,)).item())
            left = int(torch.randint(0, width - w + 1, size=(1,)).item())
            return top, left, h, w
    in_ratio = width / height  # fallback: a central crop with the ratio clamped
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class RandomResizedCrop:
    """torchvision.transforms.RandomResizedCrop on a PIL image (BILINEAR, Pillow antialias)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, image: Image.Image) -> Image.Image:
        width, height = image.size
        top, left, h, w = rrc_params(height, width)
        crop = image.crop((left, top, left + w, top + h))
        return crop.resize((self.size, self.size), Image.Resampling.BILINEAR)


class RandomHorizontalFlip:
    """torchvision.transforms.RandomHorizontalFlip(p) on a PIL image."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, image: Image.Image) -> Image.Image:
        if torch.rand(1).item() < self.p:
            return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return image


def to_tensor(image: Image.Image) -> torch.Tensor:
    """torchvision.transforms.functional.to_tensor for an RGB PIL image: CHW float in [0, 1]."""
    array = torch.from_numpy(np.array(image, np.uint8, copy=True))
    array = array.view(image.size[1], image.size[0], 3).permute((2, 0, 1)).contiguous()
    return array.to(dtype=torch.get_default_dtype()).div(255)


class Normalize:
    """torchvision.transforms.Normalize (not in place): (x - mean) / std per channel."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.as_tensor(mean).view(-1, 1, 1)
        self.std = torch.as_tensor(std).view(-1, 1, 1)

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone().sub_(self.mean).div_(self.std)


class Compose:
    """torchvision.transforms.Compose."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, value: Any) -> Any:
        for transform in self.transforms:
            value = transform(value)
        return value


def train_transform(size: int = 224) -> Compose:
    """The standard ImageNet training transform."""
    return Compose([
        RandomResizedCrop(size), RandomHorizontalFlip(), to_tensor,
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def pil_loader(path: str) -> Image.Image:
    """torchvision.datasets.folder.pil_loader."""
    with open(path, "rb") as f:
        image = Image.open(f)
        return image.convert("RGB")


class ImageFolder(torch.utils.data.Dataset):
    """torchvision.datasets.ImageFolder: sorted class folders, (transformed image, label)."""

    def __init__(self, root: Path, transform: Callable[[Image.Image], Any]) -> None:
        self.classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
        self.samples = [
            (str(path), label)
            for label, name in enumerate(self.classes)
            for path in sorted((Path(root) / name).rglob("*"))
            if path.suffix.lower() in IMAGE_SUFFIXES
        ]
        if not self.samples:
            raise FileNotFoundError(f"no images under {root}; pass an ImageFolder-style tree.")
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        return self.transform(pil_loader(path)), label
