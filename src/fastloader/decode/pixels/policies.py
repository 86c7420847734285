"""The policy augmentations: TrivialAugmentWide, RandAugment and AutoAugment (ImageNet policy).

torchvision's op lists, magnitude bins and signs (see space.py); geometric ops are Pillow's
Image.transform / Image.rotate with NEAREST and fill 0, as torchvision's PIL path calls them.
"""

from __future__ import annotations

import numpy as np

from fastloader.decode.pixels import args, space
from fastloader.decode.pixels import codes as C
from fastloader.decode.pixels.draws import Draws
from fastloader.decode.pixels.ops import PixelTransform, Steps, new_steps
from fastloader.errors import invalid_argument, invalid_type


def _bins(owner: str, value: object) -> int:
    return args.int_in(f"{owner}.num_magnitude_bins", value, 2, 1 << 16,
                       "Pass num_magnitude_bins >= 2 (torchvision's default is 31).")


class TrivialAugmentWide(PixelTransform):
    """torchvision's TrivialAugmentWide: one op of 14 a sample, uniformly, at a uniform
    magnitude bin, with a random sign.

    Args:
        num_magnitude_bins: how many magnitudes each op's range is cut into, >= 2.

    Raises:
        InvalidArgumentError: num_magnitude_bins < 2.
        InvalidTypeError: num_magnitude_bins is not an int.
    """

    def __init__(self, num_magnitude_bins: int = 31) -> None:
        self.num_magnitude_bins = _bins("TrivialAugmentWide", num_magnitude_bins)
        self._space = space.trivial_wide(self.num_magnitude_bins)

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """One step a sample (no-op for Identity)."""
        op = draws.integers(0, len(self._space.names))
        bins = draws.integers(1, self.num_magnitude_bins)
        codes, params = new_steps(draws.size, 1)
        codes[:, 0], params[:, 0, 0] = self._space.steps(op, bins, draws.uniform(2) < 0.5)
        return codes, params


class RandAugment(PixelTransform):
    """torchvision's RandAugment: `num_ops` ops a sample, each one of 14 uniformly, at the
    fixed magnitude bin, each with a random sign.

    Args:
        num_ops: the ops a sample takes, 0..64.
        magnitude: the magnitude bin, in [0, num_magnitude_bins - 1].
        num_magnitude_bins: how many magnitudes each op's range is cut into, >= 2.

    Raises:
        InvalidArgumentError: num_ops < 0, a magnitude outside the bins, fewer than 2 bins.
        InvalidTypeError: an argument that is not an int.
    """

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31) -> None:
        self.num_ops = args.int_in("RandAugment.num_ops", num_ops, 0, 64,
                                   "Pass num_ops >= 0 (torchvision's default is 2).")
        self.num_magnitude_bins = _bins("RandAugment", num_magnitude_bins)
        top = self.num_magnitude_bins - 1
        self.magnitude = args.int_in(
            "RandAugment.magnitude", magnitude, 0, top,
            f"Pass a magnitude bin in [0, {top}] (num_magnitude_bins={self.num_magnitude_bins}).")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """num_ops steps a sample."""
        table = space.rand_augment(self.num_magnitude_bins, height, width)
        codes, params = new_steps(draws.size, self.num_ops)
        bins = np.full(draws.size, self.magnitude)
        for step in range(self.num_ops):
            op = draws.integers(2 * step, len(table.names))
            negative = draws.uniform(2 * step + 1) < 0.5
            codes[:, step], params[:, step, 0] = table.steps(op, bins, negative)
        return codes, params


class AutoAugment(PixelTransform):
    """torchvision's AutoAugment: one of the policy's 25 sub-policies a sample, each of its two
    ops with its probability, at the policy's magnitude bin (of 10), with a random sign.

    Args:
        policy: "imagenet" (torchvision's AutoAugmentPolicy.IMAGENET is accepted too).

    Raises:
        InvalidArgumentError: a policy other than "imagenet".
        InvalidTypeError: a policy that is not a name.
    """

    def __init__(self, policy: object = "imagenet") -> None:
        name = getattr(policy, "value", policy)  # torchvision's AutoAugmentPolicy enum too
        if not isinstance(name, str):
            raise invalid_type("AutoAugment.policy", policy, "the policy's name, 'imagenet'")
        if name.lower() not in space.POLICIES:
            raise invalid_argument("AutoAugment.policy", policy,
                                   f"must be one of {sorted(space.POLICIES)}",
                                   "Pass policy='imagenet'.")
        self.policy = name.lower()
        table = space.POLICIES[self.policy]
        self._ops = np.array([[_op_row(op) for op in sub] for sub in table], np.int64)
        self._probabilities = np.array([[op[1] for op in sub] for sub in table])
        self._bins = np.array([[op[2] or 0 for op in sub] for sub in table], np.int64)

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """Two steps a sample (no-op where an op's probability fails)."""
        table = space.auto_augment(height, width)
        chosen = draws.integers(0, len(self._ops))
        codes, params = new_steps(draws.size, 2)
        for slot in range(2):
            runs = draws.uniform(1 + slot) <= self._probabilities[chosen, slot]
            negative = draws.uniform(3 + slot) < 0.5  # torchvision negates where its sign is 0
            code, p0 = table.steps(self._ops[chosen, slot], self._bins[chosen, slot], negative)
            codes[:, slot] = np.where(runs, code, C.NONE)
            params[:, slot, 0] = p0
        return codes, params


def _op_row(op: tuple[str, float, int | None]) -> int:
    """The row of op's name in AutoAugment's space (its names never depend on the size)."""
    return space.auto_augment(224, 224).names.index(op[0])
