"""What a packed loader yields for a dataset's fields: the collation rules (each kind's collate()
in format/kinds/ builds its column; this module hands it the batch).

- the records' image field: the decoded batch, (B, 3, H, W) as always;
- int / float fields: a tensor [B] (int64 / float64); the label field is the int64 labels;
- fixed-shape ndarray fields: a tensor [B, *shape] of the field's dtype;
- variable-length ndarray fields: a list of B tensors; with padded=True, a field variable in
  its first dim only as (values [B, L, ...] zero-padded to the batch's longest, lengths [B]
  int64); with multi_hot=C (1-D int fields) a [B, C] float32 tensor with 1 at each class;
- boxes fields: a list of B float32 [k, 4] tensors, XYXY in output pixels: mapped through each
  sample's crop, resize, flip and (ResizeFit) placement (decode/boxes.py), clipped, and boxes
  less visible than min_box_visibility dropped; their per-box fields (lists, or padded) drop
  the same rows;
- with ResizeFit, `scale` (float32 [B, 2]) and `pad` (int64 [B, 4]) of each sample
  (loader/images/detection.py), in the dict and nameable in fields=;
- mask fields: a uint8 tensor [B, H, W] of labels, cropped, resized with nearest neighbour and
  flipped with each sample's plan (decode/masks.py), with ResizeFit placed in its rectangle
  and padded with 0; built by the producer's helper thread (loader/images/masks.py) and handed over
  with the batch; page-locked and copied non_blocking on CUDA;
- text, bytes, json: lists of B Python values;
- further image fields: decoded with the same transforms (their own crops and flips) as uint8
  (B, 3, H, W) tensors (loader/images/extra_images.py); decode_images=False gives their bytes.
With views= (ViewCollator) the image field is a list of batches, one a view, and the boxes
fields, their per-box fields and the mask fields a list of their values, one a view, each
mapped through that view's crop.
Numeric tensors go to the loader's device; lists stay Python objects. fields=[...] yields a
tuple in that order; without it a classification dataset (image + label) yields (images,
labels) and any other dataset a dict of every field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fastloader.decode.boxes import DEFAULT_MIN_BOX_VISIBILITY
from fastloader.decode.geometry import Geometry
from fastloader.errors import InvalidArgumentError, invalid_type
from fastloader.format.columns import Columns
from fastloader.format.dataset import PackedDataset
from fastloader.format.fields import FieldSpec, is_classification, label_field
from fastloader.format.kinds import HoldsBoxes, Raster
from fastloader.loader.images.detection import (
    LETTERBOX_KEYS,
    check_letterbox_names,
    letterbox_value,
)
from fastloader.loader.images.extra_images import ExtraImages


def _multi_hot(multi_hot: Any, specs: dict[str, FieldSpec], names: Sequence[str]
               ) -> dict[str, int]:
    """multi_hot as {field: classes}: an int applies to the one variable 1-D int field."""
    if multi_hot is None:
        return {}
    candidates = [n for n in names if specs[n].is_array and specs[n].variable
                  and len(specs[n].shape or ()) == 1
                  and np.dtype(specs[n].dtype).kind in "iu"]
    if isinstance(multi_hot, int) and not isinstance(multi_hot, bool):
        if len(candidates) != 1:
            raise InvalidArgumentError(
                f"multi_hot={multi_hot} is invalid: it needs exactly one variable-length 1-D "
                f"int field among the output, found {candidates}. Pass "
                "multi_hot={'FIELD': NUM_CLASSES}.")
        multi_hot = {candidates[0]: multi_hot}
    if not isinstance(multi_hot, dict):
        raise invalid_type("multi_hot", multi_hot, "an int or a dict of field -> classes")
    for name, classes in multi_hot.items():
        if name not in candidates or not isinstance(classes, int) or classes < 1:
            raise InvalidArgumentError(
                f"multi_hot={{{name!r}: {classes!r}}} is invalid: it needs a variable-length "
                f"1-D int field of the output ({candidates}) and a class count >= 1.")
    return dict(multi_hot)


class FieldCollator:
    """Builds each batch's output from the decoded images, the labels and the sample indices.

    Args:
        dataset: the open PackedDataset.
        fields: the field names to yield as a tuple, or None (see the module rules).
        multi_hot: an int or {field: classes}: multi-label fields as [B, C] tensors.
        padded: variable-length ndarrays as (padded tensor, lengths) instead of lists.
        images: the decoder of further image fields (None: they come as bytes).
        min_visibility: boxes with a smaller visible area fraction are dropped.
        letterbox: the transforms end in ResizeFit: `scale` and `pad` join the fields.
    """

    def __init__(self, dataset: PackedDataset, fields: Sequence[str] | None, multi_hot: Any,
                 padded: bool = False,
                 images: ExtraImages | None = None,
                 min_visibility: float = DEFAULT_MIN_BOX_VISIBILITY,
                 letterbox: bool = False) -> None:
        self.padded = padded
        self.images = images  # None: further image fields come as bytes
        self.dataset = dataset
        specs: dict[str, FieldSpec] = dataset.fields
        self.specs = specs
        label = label_field(list(specs.values()))
        self.label = label.name if label is not None else None
        self.classic = fields is None and is_classification(list(specs.values()))
        if fields is not None and (isinstance(fields, str) or not all(
                isinstance(f, str) for f in fields)):
            raise invalid_type("fields", fields, "a list of field names")
        self.names = list(specs) if fields is None else list(fields)
        self.as_dict = fields is None
        self.letterbox = letterbox
        if letterbox:
            check_letterbox_names(specs, dataset.root)
            if fields is None and not self.classic:
                self.names += list(LETTERBOX_KEYS)
        unknown = [n for n in self.names if n not in specs
                   and not (letterbox and n in LETTERBOX_KEYS)]
        if unknown:
            raise InvalidArgumentError(
                f"fields={fields!r} is invalid: {dataset.root} has no field {unknown[0]!r}. "
                f"Its fields are {list(specs)}.")
        self.multi_hot = _multi_hot(multi_hot, specs, self.names)
        if self.classic and self.multi_hot:
            self.classic = False
        self.min_visibility = min_visibility
        # per-box field -> its boxes field; the boxes fields whose keep masks a batch needs
        self.owner = {n: s.name for s in specs.values() for n in s.per_box}
        self.box_fields = sorted({self.owner.get(n, n) for n in self.names if n in self.owner
                                  or (n in specs and isinstance(specs[n].kind, HoldsBoxes))})
        self._boxes: dict[str, tuple[list[torch.Tensor], list[np.ndarray]]] = {}
        self.mask_fields = [n for n in self.names if n in specs
                            and isinstance(specs[n].kind, Raster)]
        self._masks: dict[str, torch.Tensor] | None = None

    def __call__(self, images: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
                 labels: torch.Tensor, indices: np.ndarray,
                 seeds: tuple[int, int, int, int] = (0, 0, 0, 0),
                 geometry: Geometry | None = None,
                 masks: dict[str, torch.Tensor] | None = None) -> Any:
        """The batch's output; seeds (seed, epoch, batch, rank) draw further images' crops;
        geometry is the plan the images were decoded with; masks the mask fields built with
        that plan (loader/images/masks.py). The records' entry is the images, or a clip loader's
        pair (clips, per-clip facts)."""
        if self.classic:
            return images, labels
        values = self.columns(self.names, images, labels, indices, seeds, geometry, masks)
        return dict(zip(self.names, values, strict=True)) if self.as_dict else tuple(values)

    @property
    def spatial(self) -> list[str]:
        """The output's names that follow each image's plan: boxes fields, their per-box
        fields and mask fields (a batch of views has one of each a view)."""
        return [n for n in self.names if n in self.box_fields or n in self.owner
                or n in self.mask_fields]

    def columns(self, names: Sequence[str],
                images: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | list[torch.Tensor],
                labels: torch.Tensor, indices: np.ndarray, seeds: tuple[int, int, int, int],
                geometry: Geometry | None, masks: dict[str, torch.Tensor] | None) -> list[Any]:
        """The values of `names` for a batch (decoded by `geometry`), in that order."""
        self._seeds = seeds
        self._geometry = geometry
        self._masks = masks
        wanted = {self.owner.get(n, n) for n in names}
        self._boxes = {name: self._map(name, indices, geometry, labels.device)
                       for name in self.box_fields if name in wanted}
        return [self._column(name, images, labels, indices) for name in names]

    def _column(self, name: str,
                images: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | list[torch.Tensor],
                labels: torch.Tensor, indices: np.ndarray) -> Any:
        if name == self.dataset.image_field:
            return images
        if name == self.label:
            return labels
        if self.letterbox and name in LETTERBOX_KEYS:
            return letterbox_value(name, self._geometry, labels.device)
        columns = self.dataset.columns
        if columns is None:  # pragma: no cover - v1 has only image and label
            raise InvalidArgumentError(f"{self.dataset.root} has no field {name!r}")
        spec = self.specs[name]
        return spec.kind.collate(spec, self, indices, labels.device)

    def _columns(self) -> Columns:
        """The dataset's columns: a field other than the records and label is in one (v2)."""
        columns = self.dataset.columns
        assert columns is not None, "a v1 dataset holds no fields but its records and label"
        return columns

    # what a kind's collate() asks of the batch (format/kinds/base.py's Batch)

    def values(self, name: str, indices: np.ndarray) -> Any:
        """The batch's stored values of field name; a per-box field without the rows of the
        boxes its boxes field dropped."""
        values = self._columns().gather(name, indices)
        if name in self.owner:
            values = [v[keep] for v, keep in zip(values, self._boxes[self.owner[name]][1],
                                                 strict=True)]
        return values

    def boxes(self, name: str) -> list[torch.Tensor]:
        """Boxes field name mapped through the batch's plan (by __call__), on the device."""
        return self._boxes[name][0]

    def decode_images(self, name: str, records: list[bytes], indices: np.ndarray,
                      device: torch.device) -> torch.Tensor | None:
        """A further image field decoded with its own crops and flips (None: no decoder)."""
        if self.images is None:
            return None
        rng = np.random.default_rng([*self._seeds, 1 + self.names.index(name)])
        return self.images.decode(name, records, indices, rng, device)

    def _map(self, name: str, indices: np.ndarray,
             geometry: Geometry | None,
             device: torch.device) -> tuple[list[torch.Tensor], list[np.ndarray]]:
        """Boxes field name of the batch in output pixels, and each sample's keep mask."""
        if geometry is None:
            raise InvalidArgumentError(
                f"field {name!r} holds boxes, which need the crop plan the images were decoded "
                "with; this loader does not give it. Use the packed loader (backend 'auto', "
                "'native' or 'pillow').")
        kind = self.specs[name].kind
        assert isinstance(kind, HoldsBoxes)  # only box_fields are mapped
        return kind.map_batch(self._columns().gather_arrays(name, indices), geometry,
                              self.min_visibility, device)

    def mask(self, name: str, device: torch.device) -> torch.Tensor:
        """Mask field name of the batch, uint8 [B, H, W] on device."""
        if self._masks is None or name not in self._masks:
            raise InvalidArgumentError(
                f"field {name!r} is a mask, which needs the crop plan the images were decoded "
                "with; this loader does not give it. Use the packed loader (backend 'auto', "
                "'native' or 'pillow').")
        batch = self._masks[name]
        # a page-locked batch (CUDA): the copy overlaps; torch's host allocator keeps the
        # block until the copy is done, so dropping the host tensor here is safe
        return batch.to(device, non_blocking=batch.is_pinned())


class Views(list[Any]):
    """A value a view, in the order of views= (each View's `count` in turn): a batch's images
    (B, 3, H_v, W_v) a view, or a spatial field's values a view. A list; a batch's rows
    (loader/factory/pass_dataset.py) are counted in its first view, not by its length."""


class ViewCollator:
    """A batch of views' output (views=, loader/images/views.py): FieldCollator's, with the
    records' image field a Views list (a batch a view) and each field that follows the image's
    plan (boxes fields, their per-box fields, mask fields) a list of its values a view, in the
    views' order; (views, labels) for an image + label dataset."""

    def __init__(self, collate: FieldCollator) -> None:
        self.collate = collate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["collate"], name)  # box_fields, mask_fields, ...

    def __call__(self, views: list[torch.Tensor], labels: torch.Tensor, indices: np.ndarray,
                 seeds: tuple[int, int, int, int], geometries: Sequence[Geometry],
                 masks: Sequence[dict[str, torch.Tensor]] | None = None) -> Any:
        collate = self.collate
        if collate.classic:
            return views, labels
        spatial = collate.spatial
        plain = [n for n in collate.names if n not in spatial]
        values = dict(zip(plain, collate.columns(plain, views, labels, indices, seeds,
                                                 geometries[0], None), strict=True))
        per_view = [collate.columns(spatial, views, labels, indices, seeds, geometry,
                                    None if masks is None else masks[v])
                    for v, geometry in enumerate(geometries)] if spatial else []
        for j, name in enumerate(spatial):
            values[name] = Views(row[j] for row in per_view)
        out = [values[n] for n in collate.names]
        return dict(zip(collate.names, out, strict=True)) if collate.as_dict else tuple(out)
