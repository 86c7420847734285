"""The pixel ops with torchvision's names and arguments, each with its own `p`.

Every op draws its per-sample parameters, vectorised over the batch, into program steps
(codes int32 [N, S], params float32 [N, S, 8]); a sample that skips an op gets code 0 there.
"""

from __future__ import annotations

import math

import numpy as np

from fastloader.decode.pixels import args
from fastloader.decode.pixels import codes as C
from fastloader.decode.pixels.draws import Draws
from fastloader.errors import invalid_argument

Steps = tuple[np.ndarray, np.ndarray]


def new_steps(n: int, count: int) -> Steps:
    """Empty steps: codes zeros int32 [n, count], params zeros float32 [n, count, 8]."""
    return np.zeros((n, count), np.int32), np.zeros((n, count, C.PARAMS), np.float32)


def one_step(draws: Draws, p: float, code: int, p0: np.ndarray | float = 0.0) -> Steps:
    """One step of `code` (with p0) where draw 0 falls under p, else no op."""
    codes, params = new_steps(draws.size, 1)
    codes[:, 0] = np.where(draws.uniform(0) < p, code, C.NONE)
    params[:, 0, 0] = p0
    return codes, params


class PixelTransform:
    """A pixel-value op: draws each sample's steps of a PixelProgram."""

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """This op's steps for every sample of `draws`, on images of height x width."""
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class ColorJitter(PixelTransform):
    """torchvision's ColorJitter: brightness, contrast, saturation and hue factors drawn per
    sample and applied in a random order per sample (ImageEnhance's blends, HSV's hue shift).

    Args:
        brightness: v for factors in [max(0, 1 - v), 1 + v], or a (low, high) pair; 0 = off.
        contrast: as brightness.
        saturation: as brightness.
        hue: v in [0, 0.5] for shifts in [-v, v], or a pair within [-0.5, 0.5]; 0 = off.
        p: the probability that a sample is jittered at all, in [0, 1].

    Raises:
        InvalidArgumentError: a negative spread, a range out of its bounds, p outside [0, 1].
        InvalidTypeError: a value that is neither a number nor a pair of numbers.
    """

    _CODES = np.array([C.BRIGHTNESS, C.CONTRAST, C.SATURATION, C.HUE], np.int32)

    def __init__(self, brightness: object = 0, contrast: object = 0, saturation: object = 0,
                 hue: object = 0, p: float = 1.0) -> None:
        bound = (0.0, math.inf)
        self.brightness = args.jitter_range("ColorJitter.brightness", brightness, 1.0, bound)
        self.contrast = args.jitter_range("ColorJitter.contrast", contrast, 1.0, bound)
        self.saturation = args.jitter_range("ColorJitter.saturation", saturation, 1.0, bound)
        self.hue = args.jitter_range("ColorJitter.hue", hue, 0.0, (-0.5, 0.5))
        self.p = args.probability(p, "ColorJitter.p")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """Four steps a sample, in the sample's order; a disabled factor leaves a no-op."""
        n = draws.size
        codes, params = new_steps(n, 4)
        apply = draws.uniform(0) < self.p
        order = np.argsort(draws.block(1, 4).T, axis=1)
        ranges = (self.brightness, self.contrast, self.saturation, self.hue)
        enabled = np.array([r is not None for r in ranges])
        factors = np.zeros((n, 4))
        for column, bounds in enumerate(ranges):
            if bounds is not None:
                factors[:, column] = draws.between(5 + column, *bounds)
        rows = np.arange(n)
        for position in range(4):
            which = order[:, position]
            codes[:, position] = np.where(apply & enabled[which], self._CODES[which], C.NONE)
            params[:, position, 0] = factors[rows, which]
        return codes, params


class RandomGrayscale(PixelTransform):
    """torchvision's RandomGrayscale: Pillow's convert("L") in all three bands.

    Args:
        p: the probability of a grey sample, in [0, 1].

    Raises:
        InvalidArgumentError: p outside [0, 1].
        InvalidTypeError: p is not a number.
    """

    def __init__(self, p: float = 0.1) -> None:
        self.p = args.probability(p, "RandomGrayscale.p")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """One step: GRAYSCALE or nothing."""
        return one_step(draws, self.p, C.GRAYSCALE)


class GaussianBlur(PixelTransform):
    """Pillow's ImageFilter.GaussianBlur(radius=sigma), sigma uniform in `sigma` per sample.

    This is Pillow's definition (what DINO's and BYOL's PIL recipes call), not torchvision's
    truncated tensor kernel: Pillow's extended box blur has no kernel size, so `kernel_size` is
    checked as torchvision checks it (odd, positive) for recipes written with it, and the blur's
    extent follows sigma alone.

    Args:
        kernel_size: None, or torchvision's odd size (checked; see above).
        sigma: the radius's range (low, high), or one number; each > 0.
        p: the probability of a blur, in [0, 1].

    Raises:
        InvalidArgumentError: sigma <= 0 or low > high, an even kernel_size, p outside [0, 1].
        InvalidTypeError: sigma or kernel_size of the wrong type.
    """

    def __init__(self, kernel_size: object = None, sigma: object = (0.1, 2.0),
                 p: float = 1.0) -> None:
        self.kernel_size = args.kernel_size(kernel_size, "GaussianBlur.kernel_size")
        self.sigma = args.sigma_range(sigma, "GaussianBlur.sigma")
        self.p = args.probability(p, "GaussianBlur.p")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """One step: BLUR with the sample's radius, or nothing."""
        return one_step(draws, self.p, C.BLUR, draws.between(1, *self.sigma))


class RandomSolarize(PixelTransform):
    """torchvision's RandomSolarize: levels >= threshold inverted (ImageOps.solarize).

    Args:
        threshold: the level from which pixels are inverted, in [0, 256].
        p: the probability of solarising a sample, in [0, 1].

    Raises:
        InvalidArgumentError: threshold outside [0, 256], p outside [0, 1].
        InvalidTypeError: threshold or p is not a number.
    """

    def __init__(self, threshold: float, p: float = 0.5) -> None:
        self.threshold = args.number("RandomSolarize.threshold", threshold)
        if not 0.0 <= self.threshold <= 256.0:
            raise invalid_argument("RandomSolarize.threshold", threshold,
                                   "must be in [0, 256] for uint8",
                                   "Pass a level, e.g. threshold=128.")
        self.p = args.probability(p, "RandomSolarize.p")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """One step: SOLARIZE or nothing."""
        return one_step(draws, self.p, C.SOLARIZE, self.threshold)


class RandomPosterize(PixelTransform):
    """torchvision's RandomPosterize: keep the top `bits` bits (ImageOps.posterize).

    Args:
        bits: the bits kept a channel, 1..8.
        p: the probability of posterising a sample, in [0, 1].

    Raises:
        InvalidArgumentError: bits outside 1..8, p outside [0, 1].
        InvalidTypeError: bits is not an int.
    """

    def __init__(self, bits: int, p: float = 0.5) -> None:
        self.bits = args.int_in("RandomPosterize.bits", bits, 1, 8,
                                "Pass bits between 1 and 8 (8 keeps all).")
        self.p = args.probability(p, "RandomPosterize.p")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """One step: POSTERIZE or nothing."""
        return one_step(draws, self.p, C.POSTERIZE, float(self.bits))


class RandomAutocontrast(PixelTransform):
    """torchvision's RandomAutocontrast: each band stretched to 0..255 (ImageOps.autocontrast).

    Args:
        p: the probability of the stretch, in [0, 1].

    Raises:
        InvalidArgumentError: p outside [0, 1].
        InvalidTypeError: p is not a number.
    """

    def __init__(self, p: float = 0.5) -> None:
        self.p = args.probability(p, "RandomAutocontrast.p")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """One step: AUTOCONTRAST or nothing."""
        return one_step(draws, self.p, C.AUTOCONTRAST)


class RandomEqualize(PixelTransform):
    """torchvision's RandomEqualize: each band's histogram equalised (ImageOps.equalize).

    Args:
        p: the probability of equalising a sample, in [0, 1].

    Raises:
        InvalidArgumentError: p outside [0, 1].
        InvalidTypeError: p is not a number.
    """

    def __init__(self, p: float = 0.5) -> None:
        self.p = args.probability(p, "RandomEqualize.p")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """One step: EQUALIZE or nothing."""
        return one_step(draws, self.p, C.EQUALIZE)


class RandomErasing(PixelTransform):
    """torchvision's RandomErasing box draw (10 tries, then nothing), on uint8 pixels.

    `value` is in pixel levels: an int 0..255 or an (R, G, B) triple. torchvision erases after
    Normalize, where value=0 is the mean colour; to match that here, pass the mean in levels,
    e.g. value=(124, 116, 104) for ImageNet's mean. The default 0 erases to black.

    Args:
        p: the probability of an erased box, in [0, 1].
        scale: the box's area as a fraction of the image's, (low, high) within [0, 1].
        ratio: the box's aspect ratio range (low, high), low > 0.
        value: the fill, a level 0..255 or an (R, G, B) triple.

    Raises:
        InvalidArgumentError: a range out of its bounds, a level outside 0..255, value="random"
            (no noise fill on uint8 here), p outside [0, 1].
        InvalidTypeError: an argument of the wrong type.
    """

    def __init__(self, p: float = 0.5, scale: object = (0.02, 0.33), ratio: object = (0.3, 3.3),
                 value: object = 0) -> None:
        self.p = args.probability(p, "RandomErasing.p")
        self.scale = args.pair("RandomErasing.scale", scale)
        if not 0.0 <= self.scale[0] <= self.scale[1] <= 1.0:
            raise invalid_argument("RandomErasing.scale", scale, "must lie in [0, 1]",
                                   "Pass scale=(0.02, 0.33).")
        self.ratio = args.pair("RandomErasing.ratio", ratio)
        if self.ratio[0] <= 0:
            raise invalid_argument("RandomErasing.ratio", ratio, "must be > 0",
                                   "Pass ratio=(0.3, 3.3).")
        self.value = args.fill_value(value, "RandomErasing.value")

    def draw(self, draws: Draws, height: int, width: int) -> Steps:
        """One step: ERASE of the first box of 10 tries that fits, or nothing."""
        n = draws.size
        found = np.zeros(n, bool)
        box = np.zeros((n, 4))
        logs = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        tries = draws.block(1, 40).reshape(10, 4, n)  # try t: area, aspect, top, left
        for attempt in range(10):
            u_area, u_aspect, u_top, u_left = tries[attempt]
            area = height * width * (self.scale[0] + u_area * (self.scale[1] - self.scale[0]))
            aspect = np.exp(logs[0] + u_aspect * (logs[1] - logs[0]))
            box_h, box_w = np.round(np.sqrt(area * aspect)), np.round(np.sqrt(area / aspect))
            fits = ~found & (box_h < height) & (box_w < width)
            top = np.floor(u_top * (height - box_h + 1))
            left = np.floor(u_left * (width - box_w + 1))
            box[fits] = np.stack([top, left, box_h, box_w], axis=1)[fits]
            found |= fits
        codes, params = new_steps(n, 1)
        codes[:, 0] = np.where((draws.uniform(0) < self.p) & found, C.ERASE, C.NONE)
        params[:, 0, :4] = box
        params[:, 0, 4:7] = self.value
        return codes, params
