"""A kind's capabilities are protocols it meets by having their members, asked where they are
used: a toy kind registered from this module that has map_batch (HoldsBoxes) is mapped through
the batch's crop and resize and planned from by RandomIoUCrop, and the same kind without it is
not; and no module outside format/kinds/ compares kind names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fastloader
from fastloader.decode.boxes import map_batch_boxes
from fastloader.errors import InvalidArgumentError
from fastloader.format import kinds
from fastloader.format.kinds.arrays import NdarrayKind
from fastloader.format.kinds.device import arrays_to_device
from imagegen import encode, photo_like
from kind_names import kind_comparisons

PACKAGE = Path(fastloader.__file__).parent
HEIGHT, WIDTH, OUT = 40, 20, 10
WHOLE = [0.0, 0.0, float(WIDTH), float(HEIGHT)]  # XYXY: the whole image


class Marks(NdarrayKind):
    """A toy: float32 [k, 4] XYXY rectangles per sample, stored and collated as arrays."""

    def build(self, name: str, entry: Any, bad: type[Exception], where: str) -> dict[str, Any]:
        return {"dtype": "float32", "shape": (-1, 4)}


class MappedMarks(Marks):
    """The toy with HoldsBoxes' member: its rectangles follow the batch's crop plan."""

    def map_batch(self, boxes: list[np.ndarray], geometry: Any, min_visibility: float,
                  device: torch.device) -> tuple[list[torch.Tensor], list[np.ndarray]]:
        mapped, keeps = map_batch_boxes(boxes, geometry, min_visibility)
        return arrays_to_device(mapped, device), keeps

    def collate(self, spec: Any, batch: Any, indices: np.ndarray, device: torch.device) -> Any:
        return batch.boxes(spec.name)


@pytest.fixture(params=[MappedMarks, Marks], ids=["holds-boxes", "plain"])
def marked(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, bool]]:
    """(a dataset of 4 images with one whole-image mark each, whether its kind holds boxes)."""
    kind = kinds.register(request.param("marks"))
    try:
        dst = tmp_path / "marks.lmdb"
        samples = [{"image": encode(photo_like(HEIGHT, WIDTH, k)), "marks": [WHOLE]}
                   for k in range(4)]
        fastloader.pack(samples, dst, fields={"image": "image", "marks": "marks"}, workers=1)
        yield dst, isinstance(kind, kinds.HoldsBoxes)
    finally:
        kinds.unregister("marks")


def test_only_a_kind_with_map_batch_holds_boxes() -> None:
    assert isinstance(MappedMarks("m"), kinds.HoldsBoxes)
    assert not isinstance(Marks("m"), kinds.HoldsBoxes)
    assert isinstance(Marks("m"), kinds.Arrays)  # what it inherits it has
    assert isinstance(kinds.BOXES, kinds.HoldsBoxes) and isinstance(kinds.MASK, kinds.Raster)
    assert not isinstance(kinds.NDARRAY, (kinds.HoldsBoxes, kinds.Raster))
    assert [k for k in kinds.names() if kinds.is_records(kinds.get(k))] == [
        "image", "audio", "video"]


def test_the_collator_maps_a_kind_through_the_crop_plan_only_if_it_holds_boxes(
        marked: tuple[Path, bool]) -> None:
    dst, holds_boxes = marked
    with fastloader.FastLoader(dst, batch_size=4, device="cpu", num_threads=1,
                               transforms=[fastloader.Resize((OUT, OUT))],
                               fields=["image", "marks"]) as loader:
        images, marks = next(iter(loader))
    assert images.shape == (4, 3, OUT, OUT)
    # boxes are mapped into output pixels; other arrays come back as stored
    want = [0.0, 0.0, float(OUT), float(OUT)] if holds_boxes else WHOLE
    assert [m.tolist() for m in marks] == [[want]] * 4


def test_random_iou_crop_plans_from_a_kind_only_if_it_holds_boxes(
        marked: tuple[Path, bool]) -> None:
    dst, holds_boxes = marked
    transforms = [fastloader.RandomIoUCrop(options=(None,)), fastloader.Resize((OUT, OUT))]
    if not holds_boxes:
        with pytest.raises(InvalidArgumentError, match="has no boxes field"):
            fastloader.FastLoader(dst, device="cpu", transforms=transforms)
        return
    with fastloader.FastLoader(dst, batch_size=4, device="cpu", num_threads=1,
                               transforms=transforms, fields=["marks"]) as loader:
        (marks,) = next(iter(loader))
    assert [m.tolist() for m in marks] == [[[0.0, 0.0, float(OUT), float(OUT)]]] * 4


def test_no_other_module_compares_kind_names() -> None:
    found = {re.sub(r":\d+:", ":", line)  # its line number
             for line in kind_comparisons(PACKAGE, skip=PACKAGE / "format" / "kinds")}
    assert not found, found
