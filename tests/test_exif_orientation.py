"""EXIF orientation on request (issue 28 item 3): JPEGs made here with each of the 8 EXIF
Orientation tags decode as PIL.ImageOps.exif_transpose turns them through decode(), both
BatchDecoder backends, restart tiles, pack --apply-exif-orientation (the index stores each
orientation and the turned size) and FastLoader, crops planned on the turned image and boxes
and masks turned with it; ignored by default everywhere.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageOps

import fastloader
from conftest import NATIVE_DISABLED
from fastloader.decode import _native, tiles
from fastloader.decode.decode import BatchDecoder, decode
from fastloader.decode.masks import map_runs
from fastloader.decode.orientation import turn_array, turn_boxes, turned_shapes
from fastloader.errors import InvalidArgumentError
from fastloader.format.masks import encode_mask, mask_runs
from fastloader.format.open import open_dataset
from fastloader.pack.maintain.verify import verify
from imagegen import photo_like

HEIGHT, WIDTH = 40, 72  # non-square: 5-8 turn it into 72 x 40
ORIENTATIONS = range(1, 9)
BACKENDS = ["pillow"] + ([] if NATIVE_DISABLED else ["native"])
# the label region of each sample's mask and its one box, in stored pixels
REGION = (6, 10, 22, 31)  # top, left, bottom, right


def oriented_jpeg(orientation: int, seed: int = 0, height: int = HEIGHT, width: int = WIDTH,
                  **options: Any) -> bytes:
    """A photo-like JPEG whose EXIF says `orientation`."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(photo_like(height, width, seed)).save(buffer, "JPEG", quality=92,
                                                          exif=exif.tobytes(), **options)
    return buffer.getvalue()


def reference(data: bytes) -> np.ndarray:
    """What exif_transpose makes of Pillow's decode: the pixels every path must give."""
    with Image.open(io.BytesIO(data)) as image:
        return np.array(ImageOps.exif_transpose(image).convert("RGB"))


def mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_decode_turns_as_exif_transpose(orientation: int) -> None:
    data = oriented_jpeg(orientation, orientation)
    turned = reference(data)
    whole = decode(data, apply_exif_orientation=True)
    assert whole.shape == turned.shape and np.array_equal(whole, turned)
    # a crop of the turned image, mirrored: the same pixels (no resize: exactly)
    h, w = turned.shape[:2]
    crop = decode(data, crop=(3, 5, h - 9, w - 12), flip=True, apply_exif_orientation=True)
    assert np.array_equal(crop, turned[3:h - 6, 5:w - 7][:, ::-1])
    resized = decode(data, crop=(2, 4, h - 6, w - 9), size=(17, 13), flip=True,
                     apply_exif_orientation=True)
    expected = np.array(Image.fromarray(np.ascontiguousarray(turned[2:h - 4, 4:w - 5]))
                        .resize((13, 17), Image.Resampling.BILINEAR))[:, ::-1]
    assert mae(resized, expected) <= 2  # the pixel rule across backends
    # the default ignores the tag, as torchvision does
    stored = decode(data)
    assert stored.shape == (HEIGHT, WIDTH, 3)
    with Image.open(io.BytesIO(data)) as image:
        assert np.array_equal(stored, np.array(image.convert("RGB")))


def test_decode_refuses_a_crop_outside_the_turned_image() -> None:
    data = oriented_jpeg(6)
    with pytest.raises(InvalidArgumentError, match="72x40"):
        decode(data, crop=(0, 0, HEIGHT, WIDTH), apply_exif_orientation=True)
    with pytest.raises(TypeError):
        decode(data, apply_exif_orientation=1)


def _batch(progressive: bool = False) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    records = [oriented_jpeg(o, 10 + o, progressive=progressive) for o in ORIENTATIONS]
    return records, np.array(list(ORIENTATIONS), np.uint8), np.array([k % 2 == 1 for k in
                                                                       range(8)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_decoder_turns_each_record(backend: str) -> None:
    records, orientations, flips = _batch()
    crops = np.array([[2, 3, 30, 30]] * 8, np.int32)  # inside every turned image
    out = np.empty((8, 30, 30, 3), np.uint8)
    with BatchDecoder(2, backend) as decoder:
        assert decoder.decode_into(records, crops, flips, out,
                                   orientations=orientations) == [None] * 8
        small = np.empty((8, 12, 9, 3), np.uint8)
        decoder.decode_into(records, crops, flips, small, orientations=orientations)
        with pytest.raises(InvalidArgumentError, match="EXIF orientations"):
            decoder.decode_into(records, crops, flips, out, orientations=[9] * 8)
    for k, data in enumerate(records):
        window = reference(data)[2:32, 3:33]
        expected = window[:, ::-1] if flips[k] else window
        assert np.array_equal(out[k], expected), k
        resized = np.array(Image.fromarray(np.ascontiguousarray(window)).resize(
            (9, 12), Image.Resampling.BILINEAR))
        assert mae(small[k], resized[:, ::-1] if flips[k] else resized) <= 2, k


@pytest.mark.native
@pytest.mark.parametrize("progressive", [False, True])
def test_native_and_pillow_agree_through_scaling_and_tiles(progressive: bool) -> None:
    """Big enough for DCT scaling; restart-tiled copies splice only the turned crop's
    segments: the same pixels as the untiled decode."""
    records = [oriented_jpeg(o, o, 160, 232, progressive=progressive) for o in ORIENTATIONS]
    orientations = np.array(list(ORIENTATIONS), np.uint8)
    crops = np.array([[8, 16, 140, 150]] * 8, np.int32)
    flips = np.array([k % 3 == 0 for k in range(8)])
    outs = {}
    for backend in ("native", "pillow"):
        outs[backend] = np.empty((8, 14, 15, 3), np.uint8)
        with BatchDecoder(2, backend) as decoder:
            decoder.decode_into(records, crops, flips, outs[backend], orientations=orientations)
    for k in range(8):
        assert mae(outs["native"][k], outs["pillow"][k]) <= 2, k
    repacked = [tiles.repack(r, restart_mcus=2) for r in records]  # (baseline, tiled)
    assert all(r is not None for r in repacked)
    batch = tiles.TileBatch.from_tables([r.table for r in repacked])
    tiled = np.empty_like(outs["native"])
    plain = np.empty_like(outs["native"])
    with BatchDecoder(2, "native") as decoder:
        decoder.decode_into([r.data for r in repacked], crops, flips, tiled, batch,
                            orientations=orientations)
        decoder.decode_into([r.data for r in repacked], crops, flips, plain,
                            orientations=orientations)
    assert np.array_equal(tiled, plain)


def test_boxes_and_masks_turn_with_their_image() -> None:
    stored = np.zeros((HEIGHT, WIDTH), np.uint8)
    top, left, bottom, right = REGION
    stored[top:bottom, left:right] = 1
    box = np.array([[left, top, right, bottom]], np.float64)
    for o in ORIENTATIONS:
        turned = turn_array(stored, o)
        with Image.open(io.BytesIO(oriented_jpeg(o))) as image:
            assert turned.shape == ImageOps.exif_transpose(image).size[::-1]
        ys, xs = np.nonzero(turned)
        expected = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        moved = turn_boxes(box, np.array([[HEIGHT, WIDTH]]), np.array([o]))
        assert moved[0].tolist() == expected, o
        assert turned_shapes(np.array([[HEIGHT, WIDTH]]), np.array([o]))[0].tolist() == list(
            turned.shape)
        values, lengths, height, width = mask_runs(encode_mask(stored))
        out = np.empty((20, 20), np.uint8)
        crop = np.array([1, 2, 20, 20])
        map_runs(values, lengths, (height, width), crop, True, out, o)
        assert np.array_equal(out, turned[1:21, 2:22][:, ::-1])


# -- packing and the loader ----------------------------------------------------------------


def _samples() -> list[dict[str, Any]]:
    """One sample per orientation: its image, the label region as mask and box (stored
    pixels)."""
    mask = np.zeros((HEIGHT, WIDTH), np.uint8)
    top, left, bottom, right = REGION
    mask[top:bottom, left:right] = 3
    box = np.array([[left, top, right, bottom]], np.float32)
    return [{"image": oriented_jpeg(o, 30 + o), "label": o, "mask": mask, "boxes": box}
            for o in ORIENTATIONS]


FIELDS = {"image": "image", "label": "int", "mask": "mask", "boxes": ("boxes", [])}


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exif")
    tree = root / "tree"
    for o in ORIENTATIONS:
        (tree / f"o{o}").mkdir(parents=True)
        (tree / f"o{o}" / "a.jpg").write_bytes(oriented_jpeg(o, 50 + o))
    paths = {"plain": root / "plain.lmdb", "turned": root / "turned.lmdb",
             "samples": root / "samples.lmdb", "tree": tree}
    fastloader.pack(tree, paths["plain"], workers=1)
    fastloader.pack(tree, paths["turned"], workers=1, apply_exif_orientation=True)
    fastloader.pack(_samples(), paths["samples"], fields=FIELDS, workers=1,
                    apply_exif_orientation=True)
    return paths


def test_pack_stores_orientations_and_turned_sizes(packed: dict[str, Path]) -> None:
    with open_dataset(packed["turned"]) as turned, open_dataset(packed["plain"]) as plain:
        assert plain.orientations is None and "orientation" not in plain.manifest.fields
        assert "apply_exif_orientation" not in plain.manifest.options
        assert turned.manifest.options["apply_exif_orientation"] is True
        assert turned.orientations is not None
        for i in range(len(turned)):
            orientation = int(turned.path(i)[1])  # o<N>/a.jpg
            assert turned.orientations[i] == orientation
            data = bytes(turned.record(i))
            assert data == bytes(plain.record(i))  # records keep their bytes
            assert tuple(turned.shapes[i]) == reference(data).shape[:2]
            assert tuple(turned.stored_shapes[i]) == tuple(plain.shapes[i]) == (HEIGHT, WIDTH)


def test_verify_decodes_a_turned_pack(packed: dict[str, Path]) -> None:
    """verify --decode checks each record, and a mask, against its stored size."""
    for name in ("turned", "samples"):
        report = verify(packed[name], decode=True)
        assert report.problems == [], report.problems


def _loader_batch(path: Path, **options: Any) -> Any:
    loader = fastloader.FastLoader(path, batch_size=8, device="cpu", num_threads=1,
                                   **options)
    with loader:
        return next(iter(loader))


@pytest.mark.parametrize("backend", BACKENDS)
def test_loader_turns_images_crops_boxes_and_masks(packed: dict[str, Path],
                                                   backend: str) -> None:
    """CenterCrop on the turned image, then a mirror: pixels, the mask and the box follow
    the image exactly (no resize)."""
    side = 30
    transforms = [fastloader.CenterCrop(side), fastloader.RandomHorizontalFlip(1.0)]
    batch = _loader_batch(packed["samples"], transforms=transforms, backend=backend,
                          fields=("image", "label", "mask", "boxes"))
    images, labels, masks, boxes = batch
    stored = np.zeros((HEIGHT, WIDTH), np.uint8)
    top, left, bottom, right = REGION
    stored[top:bottom, left:right] = 3
    samples = _samples()
    for k, o in enumerate(labels.tolist()):
        turned = reference(samples[o - 1]["image"])
        h, w = turned.shape[:2]
        y0, x0 = round((h - side) / 2), round((w - side) / 2)
        expected = turned[y0:y0 + side, x0:x0 + side][:, ::-1]
        assert np.array_equal(images[k].permute(1, 2, 0).numpy(), expected), o
        mask = turn_array(stored, o)[y0:y0 + side, x0:x0 + side][:, ::-1]
        assert np.array_equal(masks[k].numpy(), mask), o
        ys, xs = np.nonzero(mask)
        assert boxes[k].tolist() == [[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], o


def test_loader_backends_agree_on_random_crops(packed: dict[str, Path]) -> None:
    if NATIVE_DISABLED:
        pytest.skip("FASTLOADER_DISABLE_NATIVE=1: one backend only")
    transforms = [fastloader.RandomResizedCrop(24), fastloader.RandomHorizontalFlip()]
    native = _loader_batch(packed["turned"], transforms=transforms, backend="native")
    pillow = _loader_batch(packed["turned"], transforms=transforms, backend="pillow")
    assert np.array_equal(native[1], pillow[1])
    for k in range(8):
        assert mae(native[0][k].numpy(), pillow[0][k].numpy()) <= 2, k


@pytest.mark.parametrize("backend", BACKENDS)
def test_letterbox_of_turned_images(packed: dict[str, Path], backend: str) -> None:
    """ResizeFit places the turned image (its long side along the canvas's) and its box."""
    fields = ("image", "label", "boxes", "scale", "pad")
    images, labels, boxes, scale, pad = _loader_batch(
        packed["samples"], transforms=[fastloader.ResizeFit(36, fill=7),
                                       fastloader.RandomHorizontalFlip(1.0)],
        backend=backend, fields=fields)
    top, left, bottom, right = REGION
    samples = _samples()
    for k, o in enumerate(labels.tolist()):
        turned = reference(samples[o - 1]["image"])
        h, w = turned.shape[:2]
        pad_l, pad_t, pad_r, pad_b = pad[k].tolist()
        assert (36 - pad_t - pad_b, 36 - pad_l - pad_r) == (
            (20, 36) if w > h else (36, 20)), o  # 40 x 72 or 72 x 40 to the 36 canvas
        inner = images[k, :, pad_t:36 - pad_b, pad_l:36 - pad_r].permute(1, 2, 0).numpy()
        expected = np.array(Image.fromarray(turned).resize(
            (inner.shape[1], inner.shape[0]), Image.Resampling.BILINEAR))[:, ::-1]
        assert mae(inner, expected) <= 2, o
        assert (images[k, :, :pad_t] == 7).all() and (images[k, :, 36 - pad_b:] == 7).all()
        region = turn_boxes(np.array([[left, top, right, bottom]]), np.array([[HEIGHT, WIDTH]]),
                            np.array([o]))[0]
        sx, sy = scale[k].tolist()
        x1, x2 = inner.shape[1] - region[2] * sx, inner.shape[1] - region[0] * sx  # mirrored
        expected_box = [x1 + pad_l, region[1] * sy + pad_t, x2 + pad_l, region[3] * sy + pad_t]
        assert np.allclose(boxes[k][0].tolist(), expected_box, atol=1e-4), o


def test_loader_orientation_choice(packed: dict[str, Path]) -> None:
    """None follows the pack; False shows a turned pack as stored; True needs the index's
    orientations."""
    crop = [fastloader.CenterCrop(36)]
    as_packed = _loader_batch(packed["turned"], transforms=crop)
    turned = _loader_batch(packed["turned"], transforms=crop, apply_exif_orientation=True)
    stored = _loader_batch(packed["turned"], transforms=crop, apply_exif_orientation=False)
    plain = _loader_batch(packed["plain"], transforms=crop)
    assert np.array_equal(as_packed[0], turned[0])
    assert np.array_equal(stored[0], plain[0])
    assert not np.array_equal(turned[0], plain[0])
    with pytest.raises(InvalidArgumentError, match="--apply-exif-orientation"):
        fastloader.FastLoader(packed["plain"], apply_exif_orientation=True, device="cpu")
    with pytest.raises(InvalidArgumentError, match="backend=\"dali\""):
        fastloader.FastLoader(packed["plain"], backend="dali", apply_exif_orientation=True,
                              device="cpu")


def test_dali_loads_a_turned_pack_as_stored_only_when_told(packed: dict[str, Path]) -> None:
    from fastloader.loader.dali.pipeline import dali_available

    if not dali_available():
        pytest.skip('NVIDIA DALI is not importable here: pip install "fastloader[dali]"')
    options: dict[str, Any] = {"batch_size": 8, "device": "cpu", "num_threads": 1,
                               "transforms": [fastloader.CenterCrop(36)]}
    with pytest.raises(InvalidArgumentError, match="apply_exif_orientation=False"):
        fastloader.FastLoader(packed["turned"], backend="dali", **options)
    with fastloader.FastLoader(packed["turned"], backend="dali", apply_exif_orientation=False,
                               **options) as loader:
        dali = next(iter(loader))
    native = _loader_batch(packed["plain"], transforms=[fastloader.CenterCrop(36)])
    assert np.array_equal(dali[1], native[1])
    for k in range(8):  # as stored, as the native loader shows the plain pack
        assert mae(dali[0][k].numpy(), native[0][k].numpy()) < 4, k


def test_packdata_flag_and_verify(packed: dict[str, Path], tmp_path: Path) -> None:
    dst = tmp_path / "cli.lmdb"
    run = [sys.executable, "-m", "fastloader.pack.cli", str(packed["tree"]), str(dst),
           "--apply-exif-orientation", "--workers", "1", "--quiet"]
    subprocess.run(run, check=True, capture_output=True)
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["options"]["apply_exif_orientation"] is True
    with open_dataset(dst) as ds, open_dataset(packed["turned"]) as api:
        assert np.array_equal(ds.shapes, api.shapes)
        assert np.array_equal(ds.orientations, api.orientations)
    verified = subprocess.run([sys.executable, "-m", "fastloader.pack.cli", "verify", str(dst),
                               "--decode"], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_damaged_orientation_column_is_refused(packed: dict[str, Path],
                                                 tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy.lmdb"
    shutil.copytree(packed["turned"], copy)
    path = copy / "index" / "orientation.npy"
    values = np.load(path)
    values[0] = 9
    np.save(path, values)
    manifest = json.loads((copy / "manifest.json").read_text())
    import hashlib

    manifest["fields"]["orientation"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(fastloader.DatasetError, match="EXIF orientations"):
        open_dataset(copy)


def test_orientations_are_stamped_with_the_index(packed: dict[str, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The orientation field is mapped, hashed and range-checked with the index, once per
    version: an open the stamp vouches for reads none of its rows."""
    import shutil

    from fastloader.format import index as index_mod
    from fastloader.format import integrity

    copy = tmp_path / "copy.lmdb"
    shutil.copytree(packed["turned"], copy)
    with open_dataset(copy) as ds:
        first = ds.orientations.tolist()
    hashed: list[str] = []
    check_sha256 = index_mod.Mapped.check_sha256
    monkeypatch.setattr(index_mod.Mapped, "check_sha256", lambda self, *args: (
        hashed.append(self.name), check_sha256(self, *args)))
    monkeypatch.setattr(index_mod, "load_field", None)  # no open loads a field whole
    monkeypatch.setattr(integrity, "check_index", None)
    with open_dataset(copy) as ds:
        assert ds.index_trusted and not hashed
        assert not ds.orientations.flags.writeable and ds.orientations.tolist() == first


def test_native_extension_is_what_runs_here() -> None:
    """The same file runs with and without the extension: say which one this was."""
    assert (_native.native_module() is None) == NATIVE_DISABLED
