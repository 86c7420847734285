"""Helpers shared by the tests: reference decodes, packed trees, batch collectors, damage.

Test modules import from here (and from the data generators imagegen, treegen, jpeg_corpus),
never from one another. Subprocess scripts import from here too.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from imagegen import encode, make_tree
from jpeg_corpus import photo_jpeg, random_boxes

# ImageNet's channel statistics in the 0-1 scale, as torchvision writes them.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BAD = 5  # the record damaged() breaks


def train_transforms(size: int = 24) -> list[Any]:
    """RandomResizedCrop(size) + RandomHorizontalFlip: the usual training pipeline."""
    from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop

    return [RandomResizedCrop(size), RandomHorizontalFlip()]


TRAIN = tuple(train_transforms())


def packed_tree(root: Path, classes: int = 3, per_class: int = 8, **pack_options: Any) -> Path:
    """Pack a tiny ImageFolder tree (sizes vary per image) into root/data.lmdb."""
    from fastloader.pack.pipeline.tree import pack

    make_tree(root / "tree", classes=classes, per_class=per_class)
    options: dict[str, Any] = {"workers": 1, "quiet": True, **pack_options}
    pack(root / "tree", root / "data.lmdb", **options)
    return root / "data.lmdb"


def as_format_v1(dst: Path) -> Path:
    """Rewrite a packed image + label dataset (a tree's, format v2) in place as the format v1
    dataset earlier fastloaders packed a tree into: the same shards and core index arrays,
    its manifest of version 1 (no sample_fields), without the label column a v2 index adds.
    fastloader no longer writes v1; its readers still read it (tests of that build it here)."""
    import json

    manifest = json.loads((dst / "manifest.json").read_text())
    assert [f["name"] for f in manifest["sample_fields"]] == ["image", "label"], manifest
    for name in [n for n in manifest["fields"] if n.startswith("field.")]:
        (dst / manifest["fields"].pop(name)["file"]).unlink()
    manifest["version"] = 1
    del manifest["sample_fields"]
    manifest["stats"].pop("skipped_samples", None)
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return dst


def collect(loader: Any) -> list[tuple[Any, Any]]:
    """One pass of a loader, each batch cloned (ring slots and pooled buffers are reused)."""
    return [(images.clone(), labels.clone()) for images, labels in loader]


def same_batches(a: list, b: list) -> bool:
    """True when two collected passes have equal images and labels, batch by batch."""
    import torch

    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )


def pillow_reference(data: bytes, crop=None, size=None, flip=False) -> np.ndarray:
    """The documented decode semantics, spelled out with Pillow alone."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    if crop is not None:
        top, left, h, w = crop
        im = im.crop((left, top, left + w, top + h))
    if size is not None:
        im = im.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    if flip:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(im)


def pillow_pixels(data: bytes | memoryview) -> np.ndarray:
    """Decode with Pillow in the image's own mode (no conversion): for lossless comparisons."""
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)


def png_bytes(seed: int) -> bytes:
    """A 50x70 PNG of random pixels."""
    pixels = np.random.default_rng(seed).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    return encode(pixels, "PNG")


def make_batch(n: int = 24, seed: int = 0):
    """A mixed decode batch: baseline and progressive JPEGs, every sixth a PNG; crops, flips."""
    rng = np.random.default_rng(seed)
    records, crops = [], []
    for k in range(n):
        if k % 6 == 5:
            records.append(png_bytes(k))
            crops.append(random_boxes(rng, 50, 70, 1)[0])
        else:
            records.append(memoryview(photo_jpeg(120, 160, seed=k, progressive=k % 4 == 1)))
            crops.append(random_boxes(rng, 120, 160, 1)[0])
    flips = rng.integers(0, 2, n).astype(bool)
    return records, np.array(crops, np.int32), flips


def damaged(path: Path, how: str) -> Any:
    """The packed dataset with record BAD replaced by garbage, or failing its read."""
    from fastloader.errors import CorruptRecordError
    from fastloader.format.open import open_dataset

    dataset = open_dataset(path)
    good = dataset.record

    def record(i: int, verify: bool = False) -> object:
        if i != BAD:
            return good(i)
        if how == "garbage":
            return b"\xff\xd8\xff\xe0 this is not a JPEG" + bytes(64)
        raise CorruptRecordError(f"{dataset.describe(i)} fails its crc32 check")

    dataset.record = record
    return dataset


# -- SIMD against scalar kernels: one subprocess with FASTLOADER_RESIZE_SCALAR=1 ------------

RESIZE_SOURCE = (120, 160)  # (height, width) of the resize test photo
# (crop (top, left, h, w), output (h, w)): up- and downscale on each axis, one axis unchanged,
# odd and tiny sizes, and downscales past 2.5x (windows wider than the 5-tap SIMD kernel).
RESIZE_CASES = [
    ((0, 0, 120, 160), (224, 224)),
    ((10, 7, 37, 53), (224, 224)),
    ((5, 3, 110, 150), (61, 47)),
    ((0, 0, 120, 160), (120, 77)),
    ((0, 0, 120, 160), (45, 160)),
    ((20, 30, 90, 101), (90, 33)),
    ((1, 2, 100, 9), (31, 200)),
    ((3, 4, 7, 150), (150, 7)),
    ((0, 0, 120, 160), (11, 13)),
    ((0, 0, 120, 160), (1, 1)),
    ((50, 60, 1, 1), (5, 3)),
    ((2, 2, 115, 140), (40, 150)),
    ((2, 2, 115, 140), (150, 40)),
    ((0, 1, 119, 158), (100, 97)),
]
PLANAR_OUT = (37, 45)  # odd sizes: the vector kernels' scalar tail runs too


def resize_photo() -> bytes:
    return photo_jpeg(*RESIZE_SOURCE, seed=11)


def native_resizes(data: bytes) -> list[np.ndarray]:
    """The native decode of every RESIZE_CASES crop, unflipped and flipped (no DCT scaling)."""
    from fastloader.decode import _native

    core = _native.require_native()
    outs = []
    for crop, size in RESIZE_CASES:
        for flip in (False, True):
            out = np.empty((*size, 3), np.uint8)
            assert core.decode_into(data, crop, flip, out, dct_scaling=False) is None
            outs.append(out)
    return outs


def decode_planar(threads: int = 2, n: int = 24, dtype: type = np.float32):
    """make_batch(n) decoded to NHWC `out` and, fused, to normalized NCHW `planar`."""
    import torch

    from fastloader.decode.decode import BatchDecoder
    from fastloader.gpu.device import DeviceStep

    records, crops, flips = make_batch(n)
    out = np.empty((n, *PLANAR_OUT, 3), np.uint8)
    planar = np.full((n, 3, *PLANAR_OUT), 7, dtype)
    spec = DeviceStep(torch.device("cpu"), (MEAN, STD), None).planar
    assert spec is not None
    affine = {"scale": spec.scale, "shift": spec.shift} if dtype == np.float32 else {}
    with BatchDecoder(num_threads=threads) as decoder:
        errors = decoder.decode_into(records, crops, flips, out, planar=planar, **affine)
    assert errors == [None] * n
    return out, planar, spec


def kernel_outputs() -> dict[str, np.ndarray]:
    """Everything the SIMD kernels compute, for one process's run (resize and normalize)."""
    outputs = {f"resize_{k}": a for k, a in enumerate(native_resizes(resize_photo()))}
    outputs["planar"] = decode_planar()[1]
    return outputs


def wait_child(pid: int, seconds: float) -> int | None:
    """The child's exit code, or None (after killing it) when it hangs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def run_in_fork(child: Any, seconds: float = 60) -> tuple[int | None, str]:
    """Fork; the child runs child() -> exit code (an exception: 3, its repr sent back) and never
    returns into pytest. Returns (the child's exit code, None when it hung and was killed; what
    it reported)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(reader)
            code = child()
        except BaseException as exc:  # any failure is reported to the parent
            os.write(writer, repr(exc).encode()[:500])
            code = 3
        finally:
            os._exit(code)
    os.close(writer)
    status = wait_child(pid, seconds)
    message = os.read(reader, 1000).decode()
    os.close(reader)
    return status, message


def dataset_bytes(dst: Path) -> dict[str, Any]:
    """Every file of a dataset folder by relative path: its sha256, and manifest.json's parsed
    contents without created_at. Equal results mean byte-identical datasets bar timestamps."""
    import hashlib
    import json

    found: dict[str, Any] = {}
    for path in sorted(p for p in dst.rglob("*") if p.is_file()):
        name = path.relative_to(dst).as_posix()
        if name == "manifest.json":
            found[name] = json.loads(path.read_text()) | {"created_at": None}
        else:
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def remote_dataset_bytes(url: str, **storage_options: Any) -> dict[str, Any]:
    """dataset_bytes of the dataset at url (every object under it, read through fsspec)."""
    import hashlib
    import json

    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **storage_options)
    fs.invalidate_cache()
    found: dict[str, Any] = {}
    for path in sorted(fs.find(root)):
        name, data = path[len(root) + 1 :], fs.cat_file(path)
        if name == "manifest.json":
            found[name] = json.loads(data) | {"created_at": None}
        else:
            found[name] = hashlib.sha256(data).hexdigest()
    return found


def upload_tree(folder: Path, url: str) -> None:
    """Copy every file under folder to url (fsspec), keeping relative paths."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"{root}/{path.relative_to(folder).as_posix()}")


def broken_tree(root: Path, classes: int = 3, per_class: int = 30) -> dict[str, bytes]:
    """make_flat_tree plus unreadable files early in the sorted listing (skipped when packed),
    so the shards after them start at a sample number below their place in the plan."""
    from treegen import make_flat_tree

    written = make_flat_tree(root, classes=classes, per_class=per_class)
    (root / "c00" / "a_broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    (root / "c01").mkdir(exist_ok=True)
    (root / "c01" / "a_empty.jpg").write_bytes(b"")
    return written


# Photos of coloured rectangles at known boxes, for the spatial-field geometry tests: label k is
# SHAPE_COLOURS[k]; palette_classes maps decoded pixels back to 0 (background) or 1 + label.
SHAPE_BACKGROUND = (128, 128, 128)
SHAPE_COLOURS = [(255, 0, 0), (0, 200, 0), (0, 0, 255), (255, 255, 0)]
SHAPE_PALETTE = np.array([SHAPE_BACKGROUND, *SHAPE_COLOURS], np.float32)


def rectangles_photo(rng: np.random.Generator, index: int, sides: tuple[int, int] = (224, 289),
                     min_box: int = 70, skip: float = 0.0) -> dict[str, object]:
    """A grey photo of 2x2 cells (sides drawn in [sides)), a rectangle of its own colour in each
    cell (left out with probability skip), kept apart: image, boxes (XYXY), box_labels, idx."""
    height, width = (int(v) for v in rng.integers(sides[0], sides[1], size=2))
    pixels = np.full((height, width, 3), SHAPE_BACKGROUND, np.uint8)
    boxes, labels = [], []
    cell_h, cell_w = height // 2, width // 2
    for cell, label in enumerate(rng.permutation(len(SHAPE_COLOURS)).tolist()):
        if skip and rng.random() < skip:
            continue  # some photos have fewer boxes
        top0, left0 = (cell // 2) * cell_h, (cell % 2) * cell_w
        box_h = int(rng.integers(min_box, cell_h - 8))
        box_w = int(rng.integers(min_box, cell_w - 8))
        top = top0 + 4 + int(rng.integers(0, cell_h - 8 - box_h + 1))
        left = left0 + 4 + int(rng.integers(0, cell_w - 8 - box_w + 1))
        pixels[top:top + box_h, left:left + box_w] = SHAPE_COLOURS[label]
        boxes.append([left, top, left + box_w, top + box_h])
        labels.append(label)
    buffer = io.BytesIO()  # 4:4:4 so colour edges stay where the pixels are
    Image.fromarray(pixels).save(buffer, "JPEG", quality=95, subsampling=0)
    return {"image": buffer.getvalue(), "boxes": np.array(boxes, np.float32).reshape(-1, 4),
            "box_labels": np.array(labels, np.int64), "idx": index}


def palette_classes(image: np.ndarray) -> np.ndarray:
    """Each pixel of a (3, H, W) image's nearest SHAPE_PALETTE entry: 0 background, 1 + label."""
    pixels = image.transpose(1, 2, 0).astype(np.float32)
    return np.argmin(((pixels[:, :, None, :] - SHAPE_PALETTE) ** 2).sum(-1), axis=-1)


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two XYXY boxes."""
    inter_w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter = inter_w * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def fork_mid_pass(loader: Any, end_parent_pass: bool = False, seconds: float = 40) -> str | None:
    """Fork while a pass of loader is in flight; the child runs a whole new pass, which must
    equal epoch 0's (with end_parent_pass it first steps the parent's pass, which must end
    there with a FastloaderError). The parent's pass then finishes. Returns why the child
    failed ("exit None": it hung), or None."""
    import contextlib

    from fastloader.errors import FastloaderError

    expected = [labels.tolist() for _, labels in loader]
    loader.set_epoch(0)
    it = iter(loader)
    next(it)  # a pass (threads, downloads) in flight at fork time

    def child() -> int:
        if end_parent_pass:
            with contextlib.suppress(FastloaderError):
                next(it)
        loader.set_epoch(0)
        return 0 if [lab.tolist() for _, lab in loader] == expected else 2

    status, message = run_in_fork(child, seconds)
    assert sum(1 for _ in it) == len(loader) - 1, "the parent's pass did not go on"
    return None if status == 0 else f"exit {status} (None: hung) {message}"


def batches_on_devices(dst: Any, devices: tuple[str, ...], **options: Any) -> dict[str, list]:
    """Every batch of one pass of FastLoader(dst, device=d, **options), for each device d."""
    from fastloader.loader.loader import FastLoader

    got = {}
    for device in devices:
        with FastLoader(dst, device=device, **options) as loader:
            got[device] = list(loader)
    return got


def sample_table(folder: Path, n: int = 30, bad: tuple[int, ...] = ()) -> Path:
    """folder/t.csv (path, species, size, note) over n small JPEGs in folder/img; the rows
    in `bad` name a file that is not an image (skipped with skip_bad)."""
    from imagegen import photo_like

    (folder / "img").mkdir(parents=True)
    lines = ["path,species,size,note"]
    for k in range(n):
        data = b"not an image" if k in bad else encode(photo_like(20, 20 + k % 5, k))
        (folder / "img" / f"{k}.jpg").write_bytes(data)
        lines.append(f"img/{k}.jpg,{['cat', 'dog'][k % 2]},{k * 0.5},note {k}")
    (folder / "t.csv").write_text("\n".join(lines) + "\n")
    return folder / "t.csv"


def coco_file(folder: Path, n: int = 12) -> Path:
    """folder/instances.json over n PNGs (30x40) in folder/images, each with one or two
    annotations (polygon segmentations, so --masks works) and one image with none."""
    import json

    (folder / "images").mkdir(parents=True)
    rng = np.random.default_rng(1)
    images, anns = [], []
    for i in range(n):
        name = f"{i:03d}.png"
        (folder / "images" / name).write_bytes(
            encode(rng.integers(0, 256, (30, 40, 3), np.uint8), "PNG"))
        images.append({"id": 10 + i, "file_name": f"images/{name}", "width": 40, "height": 30})
        for j in range(i % 3):  # image 0, 3, 6 ... have no annotations
            x, y = 2 + 3 * j, 1 + 2 * j
            anns.append({"id": len(anns) + 1, "image_id": 10 + i, "category_id": 1 + j,
                         "bbox": [x, y, 10, 8], "iscrowd": 0,
                         "segmentation": [[x, y, x + 10, y, x + 10, y + 8, x, y + 8]]})
    categories = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    path = folder / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": anns,
                                "categories": categories}))
    return path
