"""The training recipes of issue #46 in PIL, as torchvision's PIL path and DINO's code run them.

torchvision cannot be imported here, so each transform is written from its source: the classes
of torchvision/transforms/transforms.py and autoaugment.py, the PIL kernels of
transforms/_functional_pil.py (ImageEnhance, ImageOps, Image.transform/rotate), and DINO's own
GaussianBlur and Solarization (dino/utils.py, PIL's ImageFilter and ImageOps). Random draws use
the generators those sources use, in the same order: torch's for torchvision's transforms,
Python's `random` for DINO's two, so a DataLoader worker (which seeds both) runs them as the
originals would. These are the DataLoader baselines of benchmarks/bench_recipes.py.

The recipes:
- `dino_multicrop`: DINO's DataAugmentationDINO (main_dino.py): 2 global crops at 224 and 8
  local crops at 96, BICUBIC, flip, ColorJitter(0.4, 0.4, 0.2, 0.1) with p=0.8,
  RandomGrayscale(0.2), blur p=1.0 / 0.1 / 0.5 (global 1, global 2, local), solarize p=0.2 on
  global 2, ToTensor + Normalize. Scales 0.32-1 and 0.05-0.32 (DINOv2's defaults; DINO's
  main_dino.py defaults to 0.4-1 and 0.05-0.4, both are flags).
- `imagenet_ta`: torchvision's references/classification ClassificationPresetTrain as the
  ResNet-50 v2 recipe runs it (--auto-augment ta_wide --random-erase 0.1
  --train-crop-size 176, interpolation bilinear): RandomResizedCrop(176) + flip +
  TrivialAugmentWide(interpolation=BILINEAR) + PILToTensor/ConvertImageDtype/Normalize +
  RandomErasing(p=0.1). MixUp/CutMix run on the batch (train.py's collate_fn), not here.
- `plain`: RandomResizedCrop(224) + flip + ToTensor + Normalize (baseline.train_transform).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from baseline import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    rrc_params,
    to_tensor,
    train_transform,
)

PilOp = Callable[[Image.Image], Image.Image]


# ---------------------------------------------------------------- torchvision's transforms


class RandomResizedCrop:
    """torchvision.transforms.RandomResizedCrop on a PIL image: crop, then Image.resize."""

    def __init__(self, size: int, scale: tuple[float, float] = (0.08, 1.0),
                 interpolation: Image.Resampling = Image.Resampling.BILINEAR) -> None:
        self.size, self.scale, self.interpolation = size, scale, interpolation

    def __call__(self, image: Image.Image) -> Image.Image:
        top, left, h, w = rrc_params(image.size[1], image.size[0], self.scale)
        crop = image.crop((left, top, left + w, top + h))
        return crop.resize((self.size, self.size), self.interpolation)


class RandomApply:
    """torchvision.transforms.RandomApply: the transforms in order with probability p."""

    def __init__(self, transforms: Sequence[PilOp], p: float) -> None:
        self.transforms, self.p = list(transforms), p

    def __call__(self, image: Image.Image) -> Image.Image:
        if self.p < torch.rand(1):  # torchvision's test, draw for draw
            return image
        for transform in self.transforms:
            image = transform(image)
        return image


def adjust_hue(image: Image.Image, hue_factor: float) -> Image.Image:
    """torchvision's _functional_pil.adjust_hue: a uint8 shift of the H plane of PIL's HSV."""
    h, s, v = image.convert("HSV").split()
    planes = np.array(h, dtype=np.uint8)
    planes += np.int32(hue_factor * 255).astype(np.uint8)  # wraps around, as torchvision's
    return Image.merge("HSV", (Image.fromarray(planes, "L"), s, v)).convert(image.mode)


def _factor_range(value: float, centre: float, low_bound: float) -> tuple[float, float] | None:
    """ColorJitter._check_input for a single number: [centre - value, centre + value]."""
    low, high = max(centre - value, low_bound), centre + value
    return None if low == high == centre else (low, high)


class ColorJitter:
    """torchvision.transforms.ColorJitter: the four factors drawn, applied in a random order."""

    def __init__(self, brightness: float = 0, contrast: float = 0, saturation: float = 0,
                 hue: float = 0) -> None:
        self.brightness = _factor_range(brightness, 1.0, 0.0)
        self.contrast = _factor_range(contrast, 1.0, 0.0)
        self.saturation = _factor_range(saturation, 1.0, 0.0)
        self.hue = None if hue == 0 else (-hue, hue)

    @staticmethod
    def _draw(bounds: tuple[float, float] | None) -> float | None:
        return None if bounds is None else float(torch.empty(1).uniform_(*bounds))

    def __call__(self, image: Image.Image) -> Image.Image:
        order = torch.randperm(4)
        factors = [self._draw(self.brightness), self._draw(self.contrast),
                   self._draw(self.saturation), self._draw(self.hue)]
        enhancers = (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)
        for index in order.tolist():
            factor = factors[index]
            if factor is None:
                continue
            if index == 3:
                image = adjust_hue(image, factor)
            else:
                image = enhancers[index](image).enhance(factor)
        return image


class RandomGrayscale:
    """torchvision.transforms.RandomGrayscale: PIL's L, stacked back to three channels."""

    def __init__(self, p: float = 0.1) -> None:
        self.p = p

    def __call__(self, image: Image.Image) -> Image.Image:
        if torch.rand(1) < self.p:
            grey = np.array(image.convert("L"), dtype=np.uint8)
            return Image.fromarray(np.dstack([grey, grey, grey]), "RGB")
        return image


class RandomErasing:
    """torchvision.transforms.RandomErasing on a CHW float tensor (after Normalize): a box of
    random area and aspect set to value (0: the mean colour, once normalized)."""

    def __init__(self, p: float = 0.5, scale: tuple[float, float] = (0.02, 0.33),
                 ratio: tuple[float, float] = (0.3, 3.3), value: float = 0.0) -> None:
        self.p, self.scale, self.ratio, self.value = p, scale, ratio, value

    def box(self, height: int, width: int) -> tuple[int, int, int, int] | None:
        """RandomErasing.get_params: (top, left, h, w), or None after 10 misses."""
        log_ratio = torch.log(torch.tensor(self.ratio))
        for _ in range(10):
            area = height * width * torch.empty(1).uniform_(*self.scale).item()
            low, high = log_ratio[0].item(), log_ratio[1].item()
            aspect = torch.exp(torch.empty(1).uniform_(low, high)).item()
            h, w = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if not (h < height and w < width):
                continue
            top = int(torch.randint(0, height - h + 1, size=(1,)).item())
            left = int(torch.randint(0, width - w + 1, size=(1,)).item())
            return top, left, h, w
        return None

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        if torch.rand(1) < self.p:
            box = self.box(tensor.shape[-2], tensor.shape[-1])
            if box is not None:
                top, left, h, w = box
                tensor = tensor.clone()  # F.erase(inplace=False)
                tensor[..., top:top + h, left:left + w] = self.value
        return tensor


# ---------------------------------------------------------------- TrivialAugmentWide


def inverse_affine_matrix(center: Sequence[float], angle: float, translate: Sequence[float],
                          shear: Sequence[float]) -> list[float]:
    """torchvision's _get_inverse_affine_matrix at scale 1: output -> input coordinates."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    (cx, cy), (tx, ty) = center, translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [d, -b, 0.0, -c, a, 0.0]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def _affine(image: Image.Image, resample: Image.Resampling, *, center: Sequence[float] | None,
            translate: Sequence[float] = (0, 0),
            shear: Sequence[float] = (0.0, 0.0)) -> Image.Image:
    """F.affine's PIL branch: the centre defaults to (w/2, h/2); fill 0 outside the image."""
    if center is None:
        center = (image.size[0] * 0.5, image.size[1] * 0.5)
    matrix = inverse_affine_matrix(center, 0.0, translate, shear)
    return image.transform(image.size, Image.Transform.AFFINE, matrix, resample,
                           fillcolor=(0, 0, 0))


def apply_op(image: Image.Image, name: str, magnitude: float,
             resample: Image.Resampling) -> Image.Image:
    """autoaugment._apply_op on a PIL image (fill None, so 0 outside the image)."""
    shear = math.degrees(math.atan(magnitude))
    geometric: dict[str, Callable[[], Image.Image]] = {
        "ShearX": lambda: _affine(image, resample, center=(0, 0), shear=(shear, 0.0)),
        "ShearY": lambda: _affine(image, resample, center=(0, 0), shear=(0.0, shear)),
        "TranslateX": lambda: _affine(image, resample, center=None, translate=(int(magnitude), 0)),
        "TranslateY": lambda: _affine(image, resample, center=None, translate=(0, int(magnitude))),
        "Rotate": lambda: image.rotate(magnitude, resample, False, None, fillcolor=(0, 0, 0)),
    }
    enhancers = {"Brightness": ImageEnhance.Brightness, "Color": ImageEnhance.Color,
                 "Contrast": ImageEnhance.Contrast, "Sharpness": ImageEnhance.Sharpness}
    if name in geometric:
        return geometric[name]()
    if name in enhancers:
        return enhancers[name](image).enhance(1.0 + magnitude)
    if name == "Posterize":
        return ImageOps.posterize(image, int(magnitude))
    if name == "Solarize":
        # torchvision passes the bin's float threshold (246.5 keeps 246, int() would not)
        return ImageOps.solarize(image, magnitude)  # type: ignore[arg-type]
    if name == "AutoContrast":
        return ImageOps.autocontrast(image)
    if name == "Equalize":
        return ImageOps.equalize(image)
    if name == "Identity":
        return image
    raise ValueError(f"unknown TrivialAugmentWide op {name!r}")


def trivial_augment_space(num_bins: int) -> dict[str, tuple[torch.Tensor, bool]]:
    """TrivialAugmentWide._augmentation_space: op -> (magnitude bins, signed), in its order."""
    return {
        "Identity": (torch.tensor(0.0), False),
        "ShearX": (torch.linspace(0.0, 0.99, num_bins), True),
        "ShearY": (torch.linspace(0.0, 0.99, num_bins), True),
        "TranslateX": (torch.linspace(0.0, 32.0, num_bins), True),
        "TranslateY": (torch.linspace(0.0, 32.0, num_bins), True),
        "Rotate": (torch.linspace(0.0, 135.0, num_bins), True),
        "Brightness": (torch.linspace(0.0, 0.99, num_bins), True),
        "Color": (torch.linspace(0.0, 0.99, num_bins), True),
        "Contrast": (torch.linspace(0.0, 0.99, num_bins), True),
        "Sharpness": (torch.linspace(0.0, 0.99, num_bins), True),
        "Posterize": (8 - (torch.arange(num_bins) / ((num_bins - 1) / 6)).round().int(), False),
        "Solarize": (torch.linspace(255.0, 0.0, num_bins), False),
        "AutoContrast": (torch.tensor(0.0), False),
        "Equalize": (torch.tensor(0.0), False),
    }


class TrivialAugmentWide:
    """torchvision.transforms.TrivialAugmentWide on a PIL image: one op of the space, one bin."""

    def __init__(self, num_magnitude_bins: int = 31,
                 interpolation: Image.Resampling = Image.Resampling.NEAREST) -> None:
        self.space = trivial_augment_space(num_magnitude_bins)
        self.interpolation = interpolation

    def draw(self) -> tuple[str, float]:
        """The op and its signed magnitude, drawn as TrivialAugmentWide.forward draws them."""
        names = list(self.space)
        name = names[int(torch.randint(len(names), (1,)).item())]
        magnitudes, signed = self.space[name]
        magnitude = (float(magnitudes[torch.randint(len(magnitudes), (1,), dtype=torch.long)]
                           .item()) if magnitudes.ndim > 0 else 0.0)
        if signed and torch.randint(2, (1,)):
            magnitude *= -1.0
        return name, magnitude

    def __call__(self, image: Image.Image) -> Image.Image:
        name, magnitude = self.draw()
        return apply_op(image, name, magnitude, self.interpolation)


# ---------------------------------------------------------------- DINO's own PIL ops


class DinoGaussianBlur:
    """dino/utils.py GaussianBlur: ImageFilter.GaussianBlur(radius ~ U(0.1, 2)) with p."""

    def __init__(self, p: float = 0.5, radius_min: float = 0.1, radius_max: float = 2.0) -> None:
        self.p, self.radius_min, self.radius_max = p, radius_min, radius_max

    def __call__(self, image: Image.Image) -> Image.Image:
        if random.random() <= self.p:  # DINO's test (<=), so p=1.0 always blurs
            radius = random.uniform(self.radius_min, self.radius_max)
            return image.filter(ImageFilter.GaussianBlur(radius=radius))
        return image


class DinoSolarization:
    """dino/utils.py Solarization: ImageOps.solarize (threshold 128) with probability p."""

    def __init__(self, p: float) -> None:
        self.p = p

    def __call__(self, image: Image.Image) -> Image.Image:
        return ImageOps.solarize(image) if random.random() < self.p else image


# ---------------------------------------------------------------- the recipes


def normalize() -> Compose:
    """ToTensor + Normalize with ImageNet's statistics."""
    return Compose([to_tensor, Normalize(IMAGENET_MEAN, IMAGENET_STD)])


class DinoMultiCrop:
    """DINO's DataAugmentationDINO: one image -> [global 1, global 2, local x local_count]."""

    def __init__(self, global_scale: tuple[float, float] = (0.32, 1.0),
                 local_scale: tuple[float, float] = (0.05, 0.32), local_count: int = 8,
                 global_size: int = 224, local_size: int = 96) -> None:
        bicubic = Image.Resampling.BICUBIC
        flip_and_jitter = Compose([
            RandomHorizontalFlip(0.5),
            RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
            RandomGrayscale(0.2),
        ])
        self.global1 = Compose([RandomResizedCrop(global_size, global_scale, bicubic),
                                flip_and_jitter, DinoGaussianBlur(1.0), normalize()])
        self.global2 = Compose([RandomResizedCrop(global_size, global_scale, bicubic),
                                flip_and_jitter, DinoGaussianBlur(0.1), DinoSolarization(0.2),
                                normalize()])
        self.local = Compose([RandomResizedCrop(local_size, local_scale, bicubic),
                              flip_and_jitter, DinoGaussianBlur(0.5), normalize()])
        self.local_count = local_count

    def __call__(self, image: Image.Image) -> list[torch.Tensor]:
        crops = [self.global1(image), self.global2(image)]
        crops += [self.local(image) for _ in range(self.local_count)]
        return crops


def imagenet_ta(crop_size: int = 176, random_erase: float = 0.1) -> Compose:
    """torchvision's ClassificationPresetTrain with ta_wide and random erasing, bilinear."""
    bilinear = Image.Resampling.BILINEAR
    return Compose([
        RandomResizedCrop(crop_size, interpolation=bilinear), RandomHorizontalFlip(0.5),
        TrivialAugmentWide(interpolation=bilinear), normalize(),
        RandomErasing(p=random_erase),
    ])


@dataclass(frozen=True)
class Recipe:
    """A benchmarked recipe: its name, what it is, the per-image transform, views per sample."""

    name: str
    title: str
    make: Callable[[], Callable[[Image.Image], Any]]
    views: int
    sizes: tuple[int, ...]  # each view's square side, in view order


RECIPES: dict[str, Recipe] = {
    "dino": Recipe("dino", "DINO multi-crop (2x224 + 8x96)", DinoMultiCrop, 10,
                   (224, 224, *(96,) * 8)),
    "ta": Recipe("ta", "RandomResizedCrop 176 + TrivialAugmentWide + RandomErasing",
                 imagenet_ta, 1, (176,)),
    "plain": Recipe("plain", "RandomResizedCrop 224 + flip", lambda: train_transform(224), 1,
                    (224,)),
}
