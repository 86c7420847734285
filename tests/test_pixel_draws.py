"""The pixel ops' draws: probabilities and magnitude distributions over 10,000 samples, a
sample's steps a pure function of (seed, epoch, key, view), and bad arguments refused by name."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fastloader.decode import pixels as P
from fastloader.decode.pixels import codes as C
from fastloader.decode.pixels import space
from fastloader.errors import FastloaderError

pytestmark = pytest.mark.native_neutral

N = 10_000
KEYS = np.arange(N, dtype=np.int64) * 3 + 17


def _draw(*ops: P.PixelTransform, height: int = 224, width: int = 224, seed: int = 7,
          epoch: int = 0, view: int = 0, keys: np.ndarray = KEYS) -> P.PixelProgram:
    return P.draw_program(list(ops), seed, epoch, keys, view, height, width)


def _fraction(program: P.PixelProgram, code: int) -> float:
    return float((program.codes == code).any(axis=1).mean())


@pytest.mark.parametrize("op, code, p", [
    (P.RandomGrayscale(), C.GRAYSCALE, 0.1), (P.RandomGrayscale(0.2), C.GRAYSCALE, 0.2),
    (P.GaussianBlur(sigma=(0.1, 2.0), p=0.5), C.BLUR, 0.5),
    (P.RandomSolarize(128, p=0.3), C.SOLARIZE, 0.3),
    (P.RandomPosterize(4, p=0.7), C.POSTERIZE, 0.7),
    (P.RandomAutocontrast(), C.AUTOCONTRAST, 0.5), (P.RandomEqualize(0.25), C.EQUALIZE, 0.25),
    (P.ColorJitter(brightness=0.4, p=0.8), C.BRIGHTNESS, 0.8),
    (P.RandomErasing(p=0.25), C.ERASE, 0.25), (P.RandomEqualize(0.0), C.EQUALIZE, 0.0),
    (P.RandomEqualize(1.0), C.EQUALIZE, 1.0),
])
def test_each_op_fires_with_its_probability(op: P.PixelTransform, code: int, p: float) -> None:
    assert abs(_fraction(_draw(op), code) - p) < 0.02  # 4 standard deviations at n=10,000


def test_colorjitter_factors_are_uniform_and_orders_random() -> None:
    program = _draw(P.ColorJitter(0.4, 0.4, 0.2, 0.1))
    assert program.codes.shape == (N, 4)
    for code, (low, high) in ((C.BRIGHTNESS, (0.6, 1.4)), (C.CONTRAST, (0.6, 1.4)),
                              (C.SATURATION, (0.8, 1.2)), (C.HUE, (-0.1, 0.1))):
        factors = program.params[:, :, 0][program.codes == code]
        assert len(factors) == N and factors.min() >= low and factors.max() <= high
        quartiles = np.quantile(factors, [0.25, 0.5, 0.75])
        span = high - low
        assert np.allclose(quartiles, [low + span / 4, low + span / 2, low + 3 * span / 4],
                           atol=0.02 * span)
    orders = {tuple(row) for row in program.codes.tolist()}
    assert orders == set(itertools.permutations([C.BRIGHTNESS, C.CONTRAST, C.SATURATION, C.HUE]))
    counts = np.unique(program.codes[:, 0], return_counts=True)[1] / N
    assert np.allclose(counts, 0.25, atol=0.02)


def test_colorjitter_leaves_out_the_factors_it_was_not_given() -> None:
    program = _draw(P.ColorJitter(contrast=(0.5, 0.9)))
    assert set(np.unique(program.codes)) == {C.CONTRAST}
    assert program.params[:, 0, 0].min() >= 0.5 and program.params[:, 0, 0].max() <= 0.9


def test_blur_radius_is_uniform_in_sigma() -> None:
    radius = _draw(P.GaussianBlur(sigma=(0.1, 2.0))).params[:, 0, 0]
    assert radius.min() >= 0.1 and radius.max() <= 2.0
    assert np.allclose(np.quantile(radius, [0.1, 0.5, 0.9]), [0.29, 1.05, 1.81], atol=0.04)


def _torchvision_erasing(rng: np.random.Generator, height: int, width: int,
                         scale: tuple[float, float], ratio: tuple[float, float]
                         ) -> tuple[int, int, int, int] | None:
    """torchvision's RandomErasing.get_params, with numpy's generator."""
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        area = height * width * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        h, w = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if h < height and w < width:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    return None


def test_erasing_boxes_follow_torchvision_s_draw() -> None:
    height, width = 60, 90
    program = _draw(P.RandomErasing(p=1.0, value=(1, 2, 3)), height=height, width=width)
    fired = program.codes[:, 0] == C.ERASE
    boxes = program.params[fired, 0, :4]
    assert (boxes[:, 0] + boxes[:, 2] <= height).all()
    assert (boxes[:, 1] + boxes[:, 3] <= width).all()
    assert (program.params[fired, 0, 4:7] == (1, 2, 3)).all()
    rng = np.random.default_rng(0)
    theirs = [_torchvision_erasing(rng, height, width, (0.02, 0.33), (0.3, 3.3)) for _ in range(N)]
    found = np.array([box for box in theirs if box is not None], np.float64)
    assert abs(fired.mean() - len(found) / N) < 0.02
    for ours, reference in ((boxes[:, 2] * boxes[:, 3], found[:, 2] * found[:, 3]),
                            (np.log(boxes[:, 2] / np.maximum(boxes[:, 3], 1)),
                             np.log(found[:, 2] / np.maximum(found[:, 3], 1)))):
        scale = reference.std()
        assert np.allclose(np.quantile(ours, [0.25, 0.5, 0.75]),
                           np.quantile(reference, [0.25, 0.5, 0.75]), atol=0.06 * scale)


def _magnitudes(program: P.PixelProgram, code: int) -> np.ndarray:
    return program.params[:, :, 0][program.codes == code]


@pytest.mark.parametrize("start, end, steps", [
    (0.0, 0.99, 31), (0.0, 135.0, 31), (255.0, 0.0, 31), (0.0, 30.0, 10), (0.0, 0.3, 31),
    (0.0, 150.0 / 331.0 * 224, 31), (0.0, 150.0 / 331.0 * 183, 10), (0.0, 0.9, 10)])
def test_magnitude_bins_are_torch_s_linspace(start: float, end: float, steps: int) -> None:
    torch = pytest.importorskip("torch")
    ours = space.linspace32(start, end, steps)
    assert np.array_equal(ours, torch.linspace(start, end, steps).numpy())


@pytest.mark.parametrize("bins, levels", [(31, 6), (31, 4), (10, 4), (7, 6)])
def test_posterize_bins_are_torchvision_s(bins: int, levels: int) -> None:
    torch = pytest.importorskip("torch")
    theirs = 8 - (torch.arange(bins) / ((bins - 1) / levels)).round().int()
    table = space.trivial_wide(bins) if levels == 6 else space.rand_augment(bins, 8, 8)
    row = table.names.index("Posterize")
    assert np.array_equal(table.magnitudes[row], theirs.numpy().astype(np.float32))


def test_trivial_augment_wide_ops_bins_and_signs() -> None:
    program = _draw(P.TrivialAugmentWide())
    assert program.codes.shape == (N, 1)
    ops = [C.NONE, C.SHEAR_X, C.SHEAR_Y, C.TRANSLATE_X, C.TRANSLATE_Y, C.ROTATE, C.BRIGHTNESS,
           C.SATURATION, C.CONTRAST, C.SHARPNESS, C.POSTERIZE, C.SOLARIZE, C.AUTOCONTRAST,
           C.EQUALIZE]
    counts = np.array([(program.codes[:, 0] == code).mean() for code in ops])
    assert np.allclose(counts, 1 / 14, atol=0.015)
    rotation = _magnitudes(program, C.ROTATE)
    assert set(np.abs(rotation).tolist()) == set((np.arange(31) * 4.5).tolist())
    assert abs((rotation < 0).mean() - 0.5) < 0.06
    assert set(_magnitudes(program, C.POSTERIZE).tolist()) == {8, 7, 6, 5, 4, 3, 2}
    solarize = set((255 - np.arange(31) * 8.5).tolist())
    assert set(_magnitudes(program, C.SOLARIZE).tolist()) == solarize
    factors = _magnitudes(program, C.BRIGHTNESS)
    wide = space.linspace32(0.0, 0.99, 31).astype(np.float64)  # factors 1 +- m, as torchvision's
    assert set(factors.tolist()) == set(np.float32(np.r_[1 + wide, 1 - wide]).tolist())
    assert abs(factors.mean() - 1) < 0.05


def test_rand_augment_uses_its_fixed_magnitude_bin() -> None:
    height, width = 160, 200
    program = _draw(P.RandAugment(num_ops=2, magnitude=9), height=height, width=width)
    steps = (program.codes != 0).sum(axis=1)
    assert program.codes.shape[1] == 2
    assert abs((steps == 0).mean() - (1 / 14) ** 2) < 0.003
    assert abs((steps == 2).mean() - (13 / 14) ** 2) < 0.015
    assert set(np.abs(_magnitudes(program, C.ROTATE)).tolist()) == {9.0}
    shift = int(space.linspace32(0.0, 150.0 / 331.0 * width, 31)[9])
    assert set(np.abs(_magnitudes(program, C.TRANSLATE_X)).tolist()) == {shift}
    assert set(_magnitudes(program, C.POSTERIZE).tolist()) == {7.0}
    factors = set(_magnitudes(program, C.CONTRAST).tolist())
    assert factors == {float(np.float32(1 + 0.27)), float(np.float32(1 - 0.27))}


def test_auto_augment_runs_the_imagenet_policy_s_ops_with_their_probabilities() -> None:
    program = _draw(P.AutoAugment("imagenet"))
    names = {"Posterize": C.POSTERIZE, "Rotate": C.ROTATE, "Solarize": C.SOLARIZE,
             "AutoContrast": C.AUTOCONTRAST, "Equalize": C.EQUALIZE, "Color": C.SATURATION,
             "Invert": C.INVERT, "Contrast": C.CONTRAST, "Sharpness": C.SHARPNESS,
             "ShearX": C.SHEAR_X}
    expected = dict.fromkeys(names.values(), 0.0)
    for sub_policy in space.IMAGENET_POLICY:
        for name, p, _ in sub_policy:
            expected[names[name]] += p / len(space.IMAGENET_POLICY)
    for code, mean in expected.items():
        assert abs((program.codes == code).sum(axis=1).mean() - mean) < 0.015, C.NAMES[code]
    rotations = space.linspace32(0.0, 30.0, 10)[[9, 8, 3]]  # the policy's Rotate bins
    assert set(np.abs(_magnitudes(program, C.ROTATE)).tolist()) == set(rotations.tolist())


def test_a_sample_s_steps_depend_on_its_identity_alone() -> None:
    ops = [P.ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), P.RandomErasing(), P.RandAugment()]
    keys = KEYS[:64]
    whole = _draw(*ops, keys=keys)
    order = np.random.default_rng(1).permutation(64)
    shuffled = _draw(*ops, keys=keys[order])
    for position, index in enumerate(order):
        assert np.array_equal(shuffled.sample(position).codes, whole.sample(index).codes)
        assert np.array_equal(shuffled.sample(position).params, whole.sample(index).params)
    alone = _draw(*ops, keys=keys[5:6])
    assert np.array_equal(alone.sample(0).params, whole.sample(5).params)
    assert np.array_equal(_draw(*ops, keys=keys).params, whole.params)
    for change in ({"seed": 8}, {"epoch": 1}, {"view": 1}):
        other = _draw(*ops, keys=keys, **change)  # type: ignore[arg-type]
        assert not np.array_equal(other.params[:, :2], whole.params[:, :2]), change


def test_programs_are_compact_and_typed() -> None:
    program = _draw(P.RandomGrayscale(0.5), P.RandomSolarize(100, p=0.5), keys=KEYS[:200])
    assert program.codes.dtype == np.int32 and program.params.dtype == np.float32
    assert program.params.shape == (200, 2, 8)
    for row in program.codes:  # ops first, in the list's order, then no-ops
        taken = row[row != 0].tolist()
        assert row.tolist() == taken + [0] * (2 - len(taken))
        assert taken in ([], [C.GRAYSCALE], [C.SOLARIZE], [C.GRAYSCALE, C.SOLARIZE])
    assert _draw(P.RandomEqualize(0.0), keys=KEYS[:5]).codes.shape == (5, 0)
    assert _draw(keys=KEYS[:5]).is_empty()


@pytest.mark.parametrize("make, name", [
    (lambda: P.GaussianBlur(sigma=0), "sigma"), (lambda: P.GaussianBlur(sigma=(-1, 2)), "sigma"),
    (lambda: P.GaussianBlur(sigma=(2.0, 1.0)), "sigma"),
    (lambda: P.GaussianBlur(kernel_size=4), "kernel_size"),
    (lambda: P.GaussianBlur(p=1.5), "p"), (lambda: P.RandomGrayscale(p=-0.1), "p"),
    (lambda: P.RandomGrayscale(p="half"), "p"),
    (lambda: P.ColorJitter(brightness=-1), "brightness"), (lambda: P.ColorJitter(hue=0.7), "hue"),
    (lambda: P.ColorJitter(contrast=(2, 1)), "contrast"),
    (lambda: P.ColorJitter(saturation=[1, 2, 3]), "saturation"),
    (lambda: P.RandomPosterize(bits=0), "bits"), (lambda: P.RandomPosterize(bits=9), "bits"),
    (lambda: P.RandomPosterize(bits=4.0), "bits"),
    (lambda: P.RandomSolarize(threshold=300), "threshold"),
    (lambda: P.RandAugment(num_ops=-1), "num_ops"),
    (lambda: P.RandAugment(magnitude=31), "magnitude"),
    (lambda: P.RandAugment(magnitude=-1), "magnitude"),
    (lambda: P.RandAugment(num_magnitude_bins=1), "num_magnitude_bins"),
    (lambda: P.TrivialAugmentWide(num_magnitude_bins=1), "num_magnitude_bins"),
    (lambda: P.AutoAugment(policy="cifar11"), "policy"),
    (lambda: P.AutoAugment(policy=3), "policy"),
    (lambda: P.RandomErasing(scale=(0.5, 0.2)), "scale"),
    (lambda: P.RandomErasing(ratio=(0, 1)), "ratio"),
    (lambda: P.RandomErasing(value=300), "value"),
    (lambda: P.RandomErasing(value="random"), "value"),
    (lambda: P.RandomErasing(value=(1, 2)), "value"),
    (lambda: _draw(P.RandomGrayscale(), keys=np.zeros((2, 2), np.int64)), "keys"),
    (lambda: _draw(P.RandomGrayscale(), height=0), "height"),
    (lambda: _draw(P.RandomGrayscale(), "blur"), "ops\\[1\\]"),  # type: ignore[arg-type]
    (lambda: _draw(P.RandomGrayscale(), seed="a"), "seed"),  # type: ignore[arg-type]
])
def test_bad_arguments_are_refused_naming_the_argument(make: object, name: str) -> None:
    with pytest.raises(FastloaderError, match=rf"^(\w+\.)?{name}(?!\w)") as caught:
        make()  # type: ignore[operator]
    assert isinstance(caught.value, (ValueError, TypeError))


def test_check_pixel_transforms_names_the_bad_item() -> None:
    ops = P.check_pixel_transforms([P.RandomGrayscale(), P.RandomEqualize()])
    assert len(ops) == 2 and all(P.is_pixel_transform(op) for op in ops)
    assert not P.is_pixel_transform("RandomGrayscale")
    with pytest.raises(FastloaderError, match=r"transforms\[1\]"):
        P.check_pixel_transforms([P.RandomGrayscale(), object()])


def test_a_refusal_names_the_op_and_its_argument() -> None:
    with pytest.raises(FastloaderError, match=r"^RandomGrayscale\.p=2 is invalid: must be in"):
        P.RandomGrayscale(p=2)
    with pytest.raises(FastloaderError, match=r"^GaussianBlur\.sigma=\(-1, 2\) is invalid"):
        P.GaussianBlur(sigma=(-1, 2))


def test_a_program_of_the_wrong_arrays_is_refused() -> None:
    with pytest.raises(FastloaderError, match=r"^PixelProgram\.codes"):
        P.PixelProgram(np.zeros((2, 1), np.int64), np.zeros((2, 1, 8), np.float32))
    with pytest.raises(FastloaderError, match=r"^PixelProgram\.params"):
        P.PixelProgram(np.zeros((2, 1), np.int32), np.zeros((2, 2, 8), np.float32))
