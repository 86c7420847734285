"""The packed loader's detection wiring: which boxes column RandomIoUCrop plans from, the
`scale` / `pad` batch values of ResizeFit (decode/geometry.py's Geometry.scale() and pad()).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastloader.decode.augment import Transform, needs_boxes
from fastloader.decode.detect import ResizeFit
from fastloader.decode.geometry import Geometry
from fastloader.errors import InvalidArgumentError
from fastloader.format.dataset import PackedDataset
from fastloader.format.kinds import HoldsBoxes

LETTERBOX_KEYS = ("scale", "pad")  # batch keys of ResizeFit: float32 [B, 2], int64 [B, 4]


def plan_boxes_field(dataset: PackedDataset, transforms: Sequence[Transform]) -> str | None:
    """The boxes field RandomIoUCrop reads at plan time (None without RandomIoUCrop).

    Raises InvalidArgumentError naming the dataset when it has no such boxes field.
    """
    ops = needs_boxes(transforms)
    if not ops:
        return None
    specs = dataset.fields
    boxes = [name for name, spec in specs.items() if isinstance(spec.kind, HoldsBoxes)]
    wanted = {op.field for op in ops}
    if len(wanted) > 1:
        raise InvalidArgumentError(
            f"transforms={list(transforms)!r} is invalid: the RandomIoUCrops name different "
            f"boxes fields {sorted(map(str, wanted))}. Plan every crop from one field.")
    (field,) = wanted
    if field is None:
        if len(boxes) != 1:
            what = "no boxes field" if not boxes else f"several boxes fields {boxes}"
            raise InvalidArgumentError(
                f"RandomIoUCrop needs each sample's boxes, and {dataset.root} has {what}. "
                + ("Pack the dataset with a boxes field (e.g. `packdata instances.json DST "
                   "--images DIR`), or use RandomResizedCrop." if not boxes else
                   "Name one: RandomIoUCrop(field='NAME')."))
        return boxes[0]
    if field not in boxes:
        raise InvalidArgumentError(
            f"RandomIoUCrop(field={field!r}) is invalid: {dataset.root} has no boxes field of "
            f"that name. Its boxes fields are {boxes}.")
    return field


def letterboxed(transforms: Sequence[Transform]) -> bool:
    """True when the transforms end in ResizeFit (batches then carry scale and pad)."""
    return any(isinstance(op, ResizeFit) for op in transforms)


def check_letterbox_names(specs: dict[str, Any], root: Any) -> None:
    """Refuse a dataset whose own field would be shadowed by ResizeFit's batch keys."""
    clash = [name for name in LETTERBOX_KEYS if name in specs]
    if clash:
        raise InvalidArgumentError(
            f"{root} has a field named {clash[0]!r}, the name of ResizeFit's per-sample "
            f"{clash[0]} in each batch. Repack the dataset with another name for that field.")


def letterbox_value(name: str, geometry: Geometry | None, device: torch.device) -> torch.Tensor:
    """ResizeFit's `scale` (float32 [B, 2], x and y) or `pad` (int64 [B, 4], left, top,
    right, bottom) of a batch."""
    if geometry is None:  # pragma: no cover - the packed loader always hands its geometry
        raise InvalidArgumentError(f"{name!r} needs the batch's plan; this loader gives none")
    values = geometry.scale() if name == "scale" else geometry.pad()
    return torch.from_numpy(values).to(device)
