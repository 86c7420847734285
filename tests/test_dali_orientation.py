"""EXIF orientation: DALI (CPU operators here) and the native backend give the same pixels.

Neither backend rotates: the crop planner's boxes are in stored pixels, and an EXIF tag must
not make DALI decode a rotated image the boxes do not describe (wrong region for 2-4,
out-of-bounds boxes for the transposing orientations 5-8 on a non-square image).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from fastloader.decode.augment import RandomResizedCrop
from fastloader.format.open import open_dataset
from fastloader.loader.dali.pipeline import dali_available
from fastloader.pack.pipeline.tree import pack
from imagegen import photo_like

pytestmark = pytest.mark.skipif(
    not dali_available(),
    reason='NVIDIA DALI is not importable here: pip install "fastloader[dali]" to run these')
HEIGHT, WIDTH = 40, 72  # non-square: a transposed decode would be 72 x 40


def oriented_jpeg(orientation: int, seed: int) -> bytes:
    """A photo-like JPEG whose EXIF says `orientation` (1-8)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(photo_like(HEIGHT, WIDTH, seed)).save(buffer, "JPEG", quality=92,
                                                          exif=exif.tobytes())
    return buffer.getvalue()


@pytest.fixture(scope="module")
def oriented(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("orientation")
    for orientation in range(1, 9):
        folder = root / "tree" / f"o{orientation}"
        folder.mkdir(parents=True)
        for copy in range(2):
            (folder / f"img_{copy}.jpg").write_bytes(oriented_jpeg(orientation, orientation * 10
                                                                   + copy))
    pack(root / "tree", root / "data.lmdb", workers=1)
    dataset = open_dataset(root / "data.lmdb")
    yield dataset
    dataset.close()


def batches(dataset: Any, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    from fastloader.loader.loader import FastLoader

    options: dict[str, Any] = {"batch_size": 4, "seed": 5, "device": "cpu", "num_threads": 1,
                               "transforms": [RandomResizedCrop(24, scale=(0.3, 1.0))]}
    if backend != "dali":
        options["prefetch"] = 1
    with FastLoader(dataset, backend=backend, **options) as loader:
        pairs = [(images.clone(), labels.clone()) for images, labels in loader]
    return torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])


def test_records_keep_their_exif_orientation(oriented: Any) -> None:
    """The premise: packing kept the tags, so the comparison below sees oriented records."""
    seen = {Image.open(io.BytesIO(bytes(oriented.record(i)))).getexif().get(0x0112)
            for i in range(len(oriented))}
    assert seen == set(range(1, 9))
    assert all(tuple(shape) == (HEIGHT, WIDTH) for shape in np.asarray(oriented.shapes))


def test_dali_and_native_ignore_exif_orientation_alike(oriented: Any) -> None:
    dali_images, dali_labels = batches(oriented, "dali")
    native_images, native_labels = batches(oriented, "auto")
    assert torch.equal(dali_labels, native_labels)
    assert dali_images.shape == native_images.shape == (16, 3, 24, 24)
    for k in range(16):
        orientation = int(oriented.labels[k]) + 1  # classes o1..o8, sorted
        difference = (dali_images[k].float() - native_images[k].float()).abs().mean()
        # libjpeg-turbo builds and resamplers differ by a level or two, not by a rotation.
        assert difference < 4.0, f"orientation {orientation}: mean |diff| {difference:.1f}"


def test_decoder_arguments_on_cpu_and_gpu() -> None:
    """One orientation rule on both devices; unpinned decoder threads on the GPU."""
    from fastloader.loader.dali.pipeline import GraphSpec, decoder_args

    spec = GraphSpec(batch_size=2, num_threads=1, device_id=None, prefetch=2, out_size=(8, 8),
                     mean=None, std=None, dali_float16=False, seed=0)
    assert decoder_args(spec, "RGB") == {"device": "cpu", "output_type": "RGB",
                                         "adjust_orientation": False}
    on_gpu = decoder_args(GraphSpec(**{**spec.__dict__, "device_id": 1}), "RGB")
    assert on_gpu["device"] == "mixed" and on_gpu["affine"] is False
    assert on_gpu["adjust_orientation"] is False
