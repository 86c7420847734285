"""COCO `--masks`: each image's annotations rasterized into its `mask` field in the pack workers.

The samples are a sequence whose __getitem__ paints the mask (sources/rasterize.py), so the forked
pack workers rasterize in parallel. COCO's `height` and `width` of an image entry are the frame
its polygons and RLEs are drawn in; when they disagree with the image file's own size the
sample is bad (named by file and image id): a mask drawn in the wrong frame would not line up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from fastloader.errors import PackError
from fastloader.pack.sources.rasterize import MAX_CLASSES, BadSegmentation, Instance, semantic_mask
from fastloader.pack.sources.types import Sample
from fastloader.pack.sources.values import ERROR_KEY, PATH_KEY, WHERE_KEY


def check_classes(path: Path, count: int) -> None:
    """A uint8 mask holds class id + 1 up to 254 (255 marks crowd regions)."""
    if count > MAX_CLASSES:
        raise PackError(f"{path}: {count} categories do not fit a uint8 mask (at most "
                        f"{MAX_CLASSES}: 0 is background, 255 marks crowd regions); pack "
                        "with masks=False.")


def instance(path: Path, ann: Mapping[str, object], label: int) -> Instance | str:
    """The annotation to paint, or why it cannot be (no segmentation)."""
    segmentation = ann.get("segmentation")
    if not isinstance(segmentation, (list, dict)):
        return (f"{path}: annotation {ann.get('id')!r} has no segmentation (got "
                f"{type(segmentation).__name__}); masks=True needs polygons or an RLE on every "
                "annotation: fix or remove it, or pass skip_bad=True")
    return Instance(label, bool(ann.get("iscrowd")), segmentation, ann.get("id"))


def _image_size(file: str) -> tuple[int, int] | None:
    """(height, width) from the image file's header, None if Pillow cannot read it (the pack's
    own image check then names what is wrong)."""
    from PIL import Image

    try:
        with Image.open(file) as image:
            return image.height, image.width
    except Exception:  # any unreadable image: the pack's image check says what is wrong
        return None


def _frame(sample: Sample, entry: dict[str, Any]) -> tuple[int, int] | str:
    """(height, width) to rasterize in, or why the entry and its image disagree."""
    real = _image_size(cast(str, sample["image"]))  # coco._sample's str(file)
    given = entry.get("height"), entry.get("width")
    if given == (None, None):
        return real if real is not None else "cannot read the image's size for its mask"
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in given):
        return (f"has height/width {list(given)!r:.40}, not two positive ints; masks=True draws "
                "in that frame")
    height, width = int(given[0] or 0), int(given[1] or 0)
    if real is not None and real != (height, width):
        return (f"the COCO entry says height {height}, width {width} but the image is "
                f"{real[0]} x {real[1]}; its polygons and RLEs would not line up with its "
                "pixels: fix the entry (or the image), or pass skip_bad=True")
    return height, width


class MaskedSamples(Sequence[Sample]):
    """COCO samples with a `mask` painted on access (in the worker that reads the sample)."""

    def __init__(self, samples: list[Sample], entries: list[dict[str, Any]],  # entries: JSON
                 instances: list[list[Instance]]) -> None:
        self._samples, self._entries, self._instances = samples, entries, instances

    def __len__(self) -> int:
        return len(self._samples)

    def size_hints(self) -> list[int]:
        """The shard plan's size hints (image file sizes), without painting any mask."""
        from fastloader.pack.sources.hints import size_hint

        return [size_hint(sample.get("image")) for sample in self._samples]

    def item_keys(self) -> np.ndarray:
        """Each image's identity (its sample with the image file stamped, its entry and its
        instances' polygons), without painting any mask."""
        from fastloader.pack.sources.hints import KEY_BYTES, file_stamp, key_of

        keys = np.empty((len(self), KEY_BYTES), np.uint8)
        for i, sample in enumerate(self._samples):
            image = sample.get("image")
            stamp = file_stamp(cast(str, image)) if image else None  # coco._sample's str(file)
            keys[i] = key_of([sample | {"image": stamp},
                              self._entries[i], self._instances[i]])
        return keys

    def __getitem__(self, index: int) -> Sample:  # type: ignore[override]  # no slices
        sample = self._samples[index]
        if ERROR_KEY in sample:
            return sample
        frame = _frame(sample, self._entries[index])
        try:
            if isinstance(frame, str):
                raise BadSegmentation(frame)
            return sample | {"mask": semantic_mask(self._instances[index], *frame)}
        except BadSegmentation as exc:
            return {WHERE_KEY: sample[WHERE_KEY], PATH_KEY: sample[PATH_KEY],
                    ERROR_KEY: f"field 'mask': {exc}"}
