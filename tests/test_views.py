"""views= (fastloader.View): each batch's views as a list of image batches, every view of a sample
from that sample's one decode, drawn from (seed, epoch, batch, rank, view) on any thread count,
after a resume, on every rank and source of a mix, and the same through Pillow."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import fastloader
from fastloader import (
    ColorJitter,
    RandAugment,
    RandomGrayscale,
    TrivialAugmentWide,
)
from fastloader.decode.augment import (
    CenterCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
)
from fastloader.loader.factory.pass_dataset import batch_rows, collate_rows
from fastloader.loader.loader import FastLoader
from helpers import BAD, box_iou, damaged, palette_classes, rectangles_photo
from imagegen import encode, make_tree

N = 12
BOX_FIELDS = {"image": "image", "boxes": ("boxes", ["box_labels"]),
              "box_labels": ("ndarray", "int64", (-1,)), "idx": "int"}
SIZES = [(48, 64), (60, 40), (52, 52)]
GLOBAL = fastloader.View([RandomResizedCrop(32, scale=(0.3, 1.0)), RandomHorizontalFlip()],
                         count=2)
LOCAL = fastloader.View([RandomResizedCrop(16, scale=(0.05, 0.4)), RandomHorizontalFlip()],
                        count=3)
JITTER = fastloader.View([RandomResizedCrop(24), RandomHorizontalFlip(),
                          ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), RandomGrayscale(p=0.2)],
                         count=2)


def colour(i: int) -> np.ndarray:
    """Sample i's planted colour: every pixel of its image, so every crop of it shows it."""
    return np.array([(40 + 67 * i) % 256, (230 - 41 * i) % 256, (90 + 113 * i) % 256])


@pytest.fixture(scope="module")
def solid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """N images, each one solid colour (colour(i)), labelled i: a label names its sample."""
    dst = tmp_path_factory.mktemp("views") / "solid.lmdb"
    colours = np.stack([colour(i) for i in range(N)]).astype(np.int64)
    gaps = np.abs(colours[:, None] - colours[None]).max(axis=2) + np.eye(N, dtype=int) * 255
    assert gaps.min() > 30  # far apart: a view's colour names its sample
    samples = []
    for i in range(N):
        h, w = SIZES[i % len(SIZES)]
        pixels = np.broadcast_to(colour(i).astype(np.uint8), (h, w, 3)).copy()
        samples.append({"image": encode(pixels, "JPEG", quality=95), "label": i})
    fastloader.pack(samples, dst, fields={"image": "image", "label": "int"}, workers=1)
    return dst


def run(path: Any, **options: Any) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
    """One pass, each batch's views and labels cloned (the ring and pooled buffers recycle)."""
    settings = {"batch_size": 5, "device": "cpu", "num_threads": 1, **options}
    with FastLoader(path, **settings) as loader:
        return [([v.clone() for v in views], labels.clone()) for views, labels in loader]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        len(x[0]) == len(y[0]) and all(torch.equal(p, q) for p, q in zip(x[0], y[0], strict=True))
        and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True))


def test_views_come_as_a_list_of_batches_in_order(solid: Path) -> None:
    with FastLoader(solid, device="cpu", views=[GLOBAL, LOCAL]) as loader:
        assert loader.view_sizes == ((32, 32),) * 2 + ((16, 16),) * 3
        assert loader.image_size == (32, 32)
    batches = run(solid, views=[GLOBAL, LOCAL])
    assert [len(labels) for _, labels in batches] == [5, 5, 2]
    for views, labels in batches:
        assert isinstance(views, list) and len(views) == 5  # count expanded: 2 + 3
        shapes = [tuple(v.shape[1:]) for v in views]
        assert shapes == [(3, 32, 32)] * 2 + [(3, 16, 16)] * 3
        assert all(v.dtype == torch.uint8 and v.shape[0] == len(labels) for v in views)
        assert labels.dtype == torch.int64
    normalized = run(solid, views=[GLOBAL, LOCAL], normalize=((0.5,) * 3, (0.25,) * 3))
    assert all(v.dtype == torch.float32 for views, _ in normalized for v in views)
    first = batches[0][0][0].float() / 255
    assert torch.allclose(normalized[0][0][0], (first - 0.5) / 0.25, atol=1e-5)


def test_every_view_of_a_sample_is_taken_from_that_sample(solid: Path) -> None:
    for views, labels in run(solid, views=[GLOBAL, LOCAL], shuffle=True, seed=4):
        for view in views:
            means = view.float().mean(dim=(2, 3))  # [B, 3]: a solid image's colour
            wanted = torch.tensor(np.stack([colour(i) for i in labels.tolist()]),
                                  dtype=torch.float32)
            assert (means - wanted).abs().max() < 6, (means, wanted)


def test_one_view_is_what_transforms_gives(dataset_path: Path) -> None:
    ops = list(JITTER.transforms)
    plain = run(dataset_path, transforms=ops, shuffle=True, seed=2)
    views = run(dataset_path, views=[fastloader.View(ops)], shuffle=True, seed=2)
    # run() lists a plain batch's samples as if they were views: stack them back
    assert same([([torch.stack(images)], labels) for images, labels in plain], views)


@pytest.mark.parametrize("view", [GLOBAL, JITTER], ids=["crops", "crops+ops"])
def test_views_of_one_view_spec_draw_their_own_crops_and_ops(dataset_path: Path,
                                                             view: fastloader.View) -> None:
    first, second = run(dataset_path, views=[view], batch_size=8)[0][0][:2]
    assert first.shape == second.shape
    assert all(not torch.equal(first[k], second[k]) for k in range(8))


def test_views_are_the_same_on_one_and_two_threads_and_after_a_resume(
        dataset_path: Path) -> None:
    options = {"views": [JITTER, LOCAL], "batch_size": 4, "shuffle": True, "seed": 7}
    full = run(dataset_path, **options)
    assert same(full, run(dataset_path, **{**options, "num_threads": 2}))
    with FastLoader(dataset_path, device="cpu", num_threads=2, **options) as loader:
        iterator = iter(loader)
        head = [next(iterator) for _ in range(2)]
        state = loader.state_dict()
        del iterator, head
    with FastLoader(dataset_path, device="cpu", num_threads=1, **options) as resumed:
        resumed.load_state_dict(state)
        rest = [([v.clone() for v in views], labels.clone()) for views, labels in resumed]
    assert same(rest, full[2:])


@pytest.mark.native
def test_native_and_pillow_views_agree(dataset_path: Path) -> None:
    options = {"views": [JITTER, LOCAL], "batch_size": 6, "seed": 1}
    native = run(dataset_path, backend="native", **options)
    pillow = run(dataset_path, backend="pillow", **options)
    assert len(native) == len(pillow)
    for (a, la), (b, lb) in zip(native, pillow, strict=True):
        assert torch.equal(la, lb)
        for x, y in zip(a, b, strict=True):
            assert (x.float() - y.float()).abs().mean() < 2.0


def test_a_bad_record_is_replaced_in_every_view(solid: Path) -> None:
    dataset = damaged(solid, "garbage")
    try:
        batches = run(dataset, views=[GLOBAL, LOCAL], on_error="skip")
    finally:
        dataset.close()
    labels = torch.cat([lab for _, lab in batches]).tolist()
    assert BAD not in labels and labels.count(BAD + 1) == 2  # its place: the next record
    for views, lab in batches:
        wanted = torch.tensor(np.stack([colour(i) for i in lab.tolist()]), dtype=torch.float32)
        for view in views:
            assert (view.float().mean(dim=(2, 3)) - wanted).abs().max() < 6


def test_ranks_split_the_samples_and_draw_their_own_views(solid: Path) -> None:
    options = {"views": [GLOBAL, LOCAL], "batch_size": 3, "shuffle": True, "seed": 5}
    ranks = [run(solid, rank=r, world_size=2, **options) for r in (0, 1)]
    seen = [set(torch.cat([lab for _, lab in batches]).tolist()) for batches in ranks]
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == N
    assert same(ranks[0], run(solid, rank=0, world_size=2, **options))  # deterministic


def test_a_mix_yields_views_of_every_source(solid: Path, dataset_path: Path) -> None:
    with FastLoader([solid, dataset_path], batch_size=4, device="cpu", num_threads=1,
                    views=[GLOBAL, LOCAL], source_index=True, shuffle=True) as loader:
        sources = []
        for views, labels, source in loader:
            assert [tuple(v.shape[1:]) for v in views] == [(3, 32, 32)] * 2 + [(3, 16, 16)] * 3
            assert all(v.shape[0] == len(labels) for v in views)
            sources += source.tolist()
    assert set(sources) == {0, 1}


def test_the_dataset_view_hands_back_batches_of_views(solid: Path) -> None:
    with FastLoader(solid, batch_size=4, device="cpu", num_threads=1,
                    views=[GLOBAL, LOCAL]) as loader:
        batch = next(iter(loader))
        rows = list(batch_rows(batch))
        assert len(rows) == 4 and len(rows[0][0]) == 5  # a row holds the sample's 5 views
        assert collate_rows(rows) is batch


@pytest.mark.native_neutral
@pytest.mark.parametrize("transforms, count, words", [
    ([RandomHorizontalFlip()], 1, "View.transforms=.*needs a crop or resize"),
    ([Resize(32)], 1, "View.transforms=.*fixes its output size"),
    ([ColorJitter(0.4), RandomResizedCrop(32)], 1, r"View.transforms\[1\]=.*pixel op"),
    ([CenterCrop(32)], 0, "View.count=0"),
    ([fastloader.ResizeFit(32)], 1, r"View.transforms\[0\]=.*letterbox"),
])
def test_bad_views_are_refused_naming_the_argument(transforms: list, count: int,
                                                   words: str) -> None:
    with pytest.raises(fastloader.InvalidArgumentError, match=words):
        fastloader.View(transforms, count=count)


@pytest.mark.native_neutral
@pytest.mark.parametrize("options, words", [
    ({"transforms": [CenterCrop(8)]}, "transforms=.*inside each fastloader.View"),
    ({"batch_transform": lambda x: x}, "batch_transform=.*several"),
    ({"gpu_transforms": [fastloader.GpuMixUp(0.2, 3)]}, "gpu_transforms=.*does not run on views"),
    ({"views": []}, "views must be a non-empty list"),
    ({"views": [CenterCrop(8)]}, r"views\[0\] must be a fastloader.View"),
    ({"pixel_ops_on": "gpu"}, "pixel_ops_on='gpu'.*must be one of"),
])
def test_views_refuse_what_they_cannot_take(tmp_path: Path, options: dict, words: str) -> None:
    arguments = {"views": [GLOBAL], **options}
    with pytest.raises((fastloader.InvalidArgumentError, fastloader.InvalidTypeError),
                       match=words):
        FastLoader(tmp_path / "never-opened.lmdb", device="cpu", **arguments)


@pytest.mark.native_neutral
def test_other_paths_refuse_views_and_pixel_ops_by_name(tmp_path: Path) -> None:
    missing = tmp_path / "never-opened.lmdb"
    with pytest.raises(fastloader.InvalidArgumentError, match=r"views=.*not to the DALI loader"):
        FastLoader(missing, backend="dali", views=[GLOBAL])
    with pytest.raises(fastloader.InvalidArgumentError,
                       match=r"transforms\[1\]=.*ColorJitter is a pixel op.*backend=\"dali\""):
        FastLoader(missing, backend="dali", transforms=[CenterCrop(8), ColorJitter(0.4)])
    with pytest.raises(fastloader.InvalidArgumentError, match=r"views=.*not to the video loader"):
        FastLoader(missing, video=fastloader.Video(), views=[GLOBAL])
    with pytest.raises(fastloader.InvalidArgumentError,
                       match=r"transforms\[1\]=.*pixel op.*the video loader"):
        FastLoader(missing, video=fastloader.Video(), transforms=[CenterCrop(8),
                                                                  ColorJitter(0.4)])
    with pytest.raises(fastloader.InvalidArgumentError, match=r"views=.*not to the audio loader"):
        FastLoader(missing, audio=fastloader.Audio(), views=[GLOBAL])


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Photos of coloured rectangles with their boxes, box labels and label masks."""
    rng = np.random.default_rng(11)
    samples = []
    for i in range(10):
        sample = rectangles_photo(rng, i, sides=(120, 160), min_box=30)
        boxes, labels = sample["boxes"], sample["box_labels"]
        height, width = Image.open(io.BytesIO(sample["image"])).size[::-1]
        mask = np.zeros((height, width), np.uint8)
        for (x1, y1, x2, y2), label in zip(boxes.astype(int), labels.tolist(), strict=True):
            mask[y1:y2, x1:x2] = 1 + label
        samples.append({**sample, "mask": mask})
    dst = tmp_path_factory.mktemp("views") / "shapes.lmdb"
    fastloader.pack(samples, dst, fields={**BOX_FIELDS, "mask": "mask"}, workers=1)
    return dst


def _pixel_box(mask: np.ndarray) -> np.ndarray:
    rows, cols = np.nonzero(mask)
    return np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1], np.float64)


def test_boxes_and_masks_follow_each_view(shapes: Path) -> None:
    views = [fastloader.View([RandomResizedCrop(64, scale=(0.4, 1.0)), RandomHorizontalFlip(p=0.5)],
                             count=2),
             fastloader.View([CenterCrop(40), RandomHorizontalFlip(p=1.0)])]
    checked = 0
    with FastLoader(shapes, batch_size=4, device="cpu", num_threads=1, views=views, seed=3,
                    fields=["image", "boxes", "box_labels", "mask"],
                    min_box_visibility=0.5) as loader:
        for images, boxes, labels, masks in loader:
            assert len(images) == len(boxes) == len(labels) == len(masks) == 3
            for v, view in enumerate(images):
                assert masks[v].shape == (view.shape[0], *view.shape[2:])
                for k in range(view.shape[0]):
                    classes = palette_classes(view[k].numpy())
                    assert (classes == masks[v][k].numpy()).mean() > 0.93
                    for box, label in zip(boxes[v][k].numpy(), labels[v][k].tolist(),
                                          strict=True):
                        iou = box_iou(box.astype(np.float64), _pixel_box(classes == 1 + label))
                        assert iou >= 0.8, (v, k, box, iou)
                        checked += 1
    assert checked > 30


def test_moving_policies_are_refused_where_boxes_or_masks_follow(shapes: Path) -> None:
    ops = [CenterCrop(64), TrivialAugmentWide()]
    for fields in (["image", "boxes"], ["image", "mask"]):
        with pytest.raises(fastloader.InvalidArgumentError, match="TrivialAugmentWide shears"):
            FastLoader(shapes, device="cpu", transforms=ops, fields=fields)
    with pytest.raises(fastloader.InvalidArgumentError, match="RandAugment shears"):
        FastLoader(shapes, device="cpu", fields=["image", "mask"],
                   views=[fastloader.View([CenterCrop(64), RandAugment()])])
    with FastLoader(shapes, device="cpu", num_threads=1, batch_size=4, transforms=ops,
                    fields=["image", "idx"]) as loader:  # no spatial field: the policy runs
        images, _ = next(iter(loader))
        assert images.shape == (4, 3, 64, 64)


def test_each_record_is_decoded_once_for_all_its_views(solid: Path) -> None:
    with FastLoader(solid, batch_size=5, device="cpu", num_threads=2,
                    views=[GLOBAL, LOCAL]) as loader:
        before = loader._decoder.records_decoded  # the loader's own BatchDecoder
        assert sum(len(labels) for _, labels in loader) == N
        assert loader._decoder.records_decoded - before == N  # not N x 5 views


def test_a_further_image_field_is_refused_with_views_unless_left_as_bytes(
        tmp_path: Path) -> None:
    pixels = np.zeros((40, 48, 3), np.uint8)
    samples = [{"image": encode(pixels + i, "JPEG"), "depth": encode(pixels, "JPEG"),
                "label": i} for i in range(4)]
    dst = tmp_path / "two.lmdb"
    fastloader.pack(samples, dst, fields={"image": "image", "depth": "image", "label": "int"},
                    workers=1)
    with pytest.raises(fastloader.InvalidArgumentError, match=r"views=.*\['depth'\]"):
        FastLoader(dst, device="cpu", views=[GLOBAL])
    with FastLoader(dst, device="cpu", views=[GLOBAL], batch_size=4, num_threads=1,
                    decode_images=False) as loader:
        batch = next(iter(loader))
        assert len(batch["image"]) == 2 and isinstance(batch["depth"][0], bytes)
    with FastLoader(dst, device="cpu", views=[GLOBAL], batch_size=4, num_threads=1,
                    fields=["image", "label"]) as loader:
        crops, labels = next(iter(loader))
        assert len(crops) == 2 and labels.tolist() == [0, 1, 2, 3]


@pytest.mark.native
@pytest.mark.parametrize("codec", ["tiles", "coeffs"])
def test_views_of_tiled_and_coeffs_records_match_the_jpeg_records(tmp_path: Path,
                                                                  codec: str) -> None:
    make_tree(tmp_path / "tree", classes=3, per_class=3, size=(64, 80))
    for name, how in (("jpeg", "jpeg"), (codec, codec)):
        fastloader.pack(tmp_path / "tree", tmp_path / f"{name}.lmdb", workers=1, quiet=True,
                        codec=how)
    options = {"views": [JITTER, LOCAL], "batch_size": 4, "shuffle": True, "seed": 3}
    plain = run(tmp_path / "jpeg.lmdb", **options)
    other = run(tmp_path / f"{codec}.lmdb", **options)
    for (a, la), (b, lb) in zip(plain, other, strict=True):
        assert torch.equal(la, lb)
        for x, y in zip(a, b, strict=True):
            assert (x.float() - y.float()).abs().mean() < 1.0
