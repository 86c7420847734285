"""The recipes benchmark: PIL baselines as torchvision and DINO define them; the script runs."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance

import fastloader
from imagegen import make_tree, photo_like

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_recipes  # noqa: E402
import harness  # noqa: E402
import pil_recipes  # noqa: E402

NEAREST = Image.Resampling.NEAREST


def _photo(height: int = 120, width: int = 160, seed: int = 0) -> Image.Image:
    return Image.fromarray(photo_like(height, width, seed), "RGB")


@pytest.mark.native_neutral
def test_dino_multicrop_gives_two_global_and_eight_local_views() -> None:
    torch.manual_seed(0)
    random.seed(0)
    views = pil_recipes.DinoMultiCrop()(_photo())
    assert [tuple(v.shape) for v in views] == [(3, 224, 224)] * 2 + [(3, 96, 96)] * 8
    assert all(v.dtype == torch.float32 for v in views)
    recipe = pil_recipes.RECIPES["dino"]
    assert recipe.views == len(views) and [v.shape[-1] for v in views] == list(recipe.sizes)
    # normalized with ImageNet's statistics: values beyond [0, 1] on both sides
    assert min(float(v.min()) for v in views) < 0 < 1 < max(float(v.max()) for v in views)


@pytest.mark.native_neutral
def test_dino_views_are_crops_of_their_own_image() -> None:
    # a flat image stays flat through crops, flips, blur and solarize; jitter and greyscale
    # change its colour but never make a flat image vary
    torch.manual_seed(1)
    random.seed(1)
    flat = Image.new("RGB", (200, 150), (40, 160, 90))
    for view in pil_recipes.DinoMultiCrop()(flat):
        assert float((view - view.mean(dim=(1, 2), keepdim=True)).abs().max()) < 1e-5


@pytest.mark.native_neutral
def test_reference_and_plain_recipes_give_one_view_of_their_size() -> None:
    torch.manual_seed(0)
    for name, side in (("ta", 176), ("plain", 224)):
        recipe = pil_recipes.RECIPES[name]
        out = recipe.make()(_photo())
        assert tuple(out.shape) == (3, side, side) and recipe.sizes == (side,)


@pytest.mark.native_neutral
def test_color_jitter_draws_order_then_factors_as_torchvision() -> None:
    # torchvision's get_params: randperm(4) first, then one uniform per factor in order
    image = _photo()
    torch.manual_seed(7)
    jittered = pil_recipes.ColorJitter(brightness=0.4, contrast=0.4)(image)
    torch.manual_seed(7)
    order = torch.randperm(4).tolist()
    b = float(torch.empty(1).uniform_(0.6, 1.4))
    c = float(torch.empty(1).uniform_(0.6, 1.4))
    expected = image
    for index in order:
        if index == 0:
            expected = ImageEnhance.Brightness(expected).enhance(b)
        elif index == 1:
            expected = ImageEnhance.Contrast(expected).enhance(c)
    assert np.array_equal(np.asarray(jittered), np.asarray(expected))


@pytest.mark.native_neutral
@pytest.mark.parametrize(("factor", "dominant"), [(1 / 3, 1), (-1 / 3, 2)])
def test_hue_shift_wraps_both_ways(factor: float, dominant: int) -> None:
    # pure red turned a third of the circle: green one way, blue the other (the uint8 wrap)
    red = Image.new("RGB", (4, 4), (255, 0, 0))
    pixel = np.asarray(pil_recipes.adjust_hue(red, factor))[0, 0]
    assert int(np.argmax(pixel)) == dominant and pixel[dominant] > 200


@pytest.mark.native_neutral
def test_trivial_augment_space_is_torchvisions() -> None:
    space = pil_recipes.trivial_augment_space(31)
    assert len(space) == 14 and next(iter(space)) == "Identity"
    posterize, signed = space["Posterize"]
    assert not signed and posterize.tolist()[:6] == [8, 8, 8, 7, 7, 7]
    assert posterize.tolist()[-1] == 2 and sorted(set(posterize.tolist())) == list(range(2, 9))
    assert space["Solarize"][0][0] == 255 and space["Solarize"][0][-1] == 0
    assert space["Rotate"][0][-1] == pytest.approx(135.0) and space["Rotate"][1]


@pytest.mark.native_neutral
def test_trivial_augment_draws_every_op_evenly_and_signs_both_ways() -> None:
    torch.manual_seed(0)
    augment = pil_recipes.TrivialAugmentWide()
    draws = [augment.draw() for _ in range(2800)]
    counts = {name: sum(1 for n, _ in draws if n == name) for name in augment.space}
    assert all(120 < n < 280 for n in counts.values()), counts  # 200 expected each
    rotations = [m for n, m in draws if n == "Rotate"]
    assert min(rotations) < -60 and max(rotations) > 60
    assert all(m == 0.0 for n, m in draws if n in ("Identity", "Equalize", "AutoContrast"))


@pytest.mark.native_neutral
def test_shear_x_turns_about_the_top_left_corner() -> None:
    # torchvision shears with center=[0, 0]: output (x, y) samples input (x + m*y, y)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    out = np.asarray(pil_recipes.apply_op(Image.fromarray(pixels), "ShearX", 0.5, NEAREST))
    for y in (0, 7, 20, 39):
        for x in (0, 3, 10):
            source = math.floor(x + 0.5 + 0.5 * (y + 0.5))
            if source < 60:
                assert np.array_equal(out[y, x], pixels[y, source]), (x, y)
    assert np.array_equal(out[39, 59], [0, 0, 0])  # sheared in from outside: fill 0


@pytest.mark.native_neutral
def test_translate_moves_by_whole_pixels_and_fills_black() -> None:
    pixels = np.random.default_rng(1).integers(1, 256, (30, 50, 3), dtype=np.uint8)
    out = np.asarray(pil_recipes.apply_op(Image.fromarray(pixels), "TranslateX", 7.9, NEAREST))
    assert np.array_equal(out[:, 7:], pixels[:, :-7])  # int(7.9) = 7, as torchvision
    assert not out[:, :7].any()


@pytest.mark.native_neutral
def test_random_erasing_sets_a_box_within_its_scale() -> None:
    torch.manual_seed(3)
    erase = pil_recipes.RandomErasing(p=1.0)
    ones = torch.ones(3, 100, 100)
    out = erase(ones)
    erased = (out == 0).all(dim=0)
    assert 0.02 * 1e4 * 0.9 <= int(erased.sum()) <= 0.33 * 1e4 * 1.1
    rows, cols = erased.any(dim=1).nonzero(), erased.any(dim=0).nonzero()
    box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
    assert int(box) == int(erased.sum())  # one rectangle
    assert bool((ones == 1).all())  # not in place
    assert torch.equal(pil_recipes.RandomErasing(p=0.0)(ones), ones)


@pytest.mark.native_neutral
def test_dino_blur_always_blurs_at_p_one_and_solarize_inverts_the_bright() -> None:
    random.seed(0)
    image = _photo()
    blurred = [pil_recipes.DinoGaussianBlur(1.0)(image) for _ in range(20)]
    assert all(b is not image for b in blurred)
    assert all(pil_recipes.DinoGaussianBlur(0.0)(image) is image for _ in range(20))
    white = Image.new("RGB", (2, 2), (250, 10, 128))
    assert np.asarray(pil_recipes.DinoSolarization(1.0)(white))[0, 0].tolist() == [5, 10, 127]


@pytest.mark.native_neutral
def test_parse_args_refuses_a_tree_too_small_for_the_timed_samples() -> None:
    with pytest.raises(SystemExit):
        bench_recipes.parse_args(["--count", "100", "--images", "90", "--batch", "32"])
    args = bench_recipes.parse_args(["--quick"])
    assert args.repeats == 2 and args.workers == [2, 3]


@pytest.mark.native_neutral
def test_table_counts_views_per_second() -> None:
    def row(name: str, rate: float) -> dict:
        s = harness.summarize([rate])
        return {"name": name, "img_per_s": s, "cpu_s_per_img": s, "peak_rss_mb": 1.0}

    rows = [row("DataLoader workers=2", 20.0), row("FastLoader", 100.0),
            row("FastLoader, first view alone", 300.0)]
    lines = bench_recipes.table(pil_recipes.RECIPES["dino"], rows).splitlines()
    assert "| 200 " in lines[2]  # 20 samples/s x 10 views
    assert "| 1000 " in lines[3] and "5.00x" in lines[3]
    assert "| 300 " in lines[4]  # one view a sample


@pytest.mark.native_neutral
def test_fastloader_rows_write_dinos_ten_views_and_their_variants() -> None:
    missing = bench_recipes.fastloader_missing()
    if missing is not None:
        pytest.skip(missing)
    full = bench_recipes.fastloader_views("dino")["views"]
    assert [view.count for view in full] == [1, 1, 8]
    assert [len(view.pixel_ops) for view in full] == [3, 4, 3]  # jitter, grey, blur (+solarize)
    geometry = bench_recipes.fastloader_views("dino", "geometry")["views"]
    assert [view.count for view in geometry] == [1, 1, 8]
    assert all(not view.pixel_ops for view in geometry)
    first = bench_recipes.fastloader_views("dino", "first")["views"]
    assert [repr(view) for view in first] == [repr(full[0])]
    ta = bench_recipes.fastloader_views("ta")["transforms"]
    assert [type(op).__name__ for op in ta][2:] == ["TrivialAugmentWide", "RandomErasing"]


@pytest.mark.heavy
def test_benchmark_runs_every_recipe_on_both_sides_and_both_codecs(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "images", classes=2, per_class=6, size=(60, 80))
    out = tmp_path / "recipes.jsonl"
    argv = ["--data", str(tree), "--count", "12", "--images", "4", "--batch", "2",
            "--repeats", "1", "--warmup", "1", "--workers", "1", "--coeffs", "--out", str(out)]
    assert bench_recipes.main(argv) == 0
    records = harness.read_jsonl(out)
    summaries = [r for r in records if r["kind"] == "summary"]
    dataloader = {r["recipe"] for r in summaries if r["name"] == "DataLoader workers=1"}
    assert dataloader == set(pil_recipes.RECIPES)
    assert all(r["img_per_s"]["median"] > 0 and len(r["load_before"]) == 3 for r in summaries)
    skipped = [r for r in records if r["kind"] == "skipped"]
    names = ["FastLoader"]
    if fastloader.native_available():
        names.append("FastLoader, coeffs records")
        assert not skipped
    else:  # the fallback pass: coeffs records need the extension, and the row says so
        assert [r["name"] for r in skipped] == ["FastLoader, coeffs records"]
        assert "native extension" in skipped[0]["reason"]
    for name in names:
        assert {r["recipe"] for r in summaries if r["name"] == name} == set(pil_recipes.RECIPES)
