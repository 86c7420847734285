"""What a kind can do beyond storing and loading values: one small abstract class a capability.

A kind has a capability by having its members (HoldsBoxes: map_batch ...), and a caller asks
where it needs one, `isinstance(spec.kind, HoldsBoxes)`, so it reads the question it asks,
not a flag every kind carries. A capability is an abstract class whose `__subclasshook__`
answers by the members a kind's class has (a kind instance sets none of its own), and `abc`
keeps each answer per class: some callers ask per sample.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    import torch

    from fastloader.decode.geometry import Geometry
    from fastloader.format.kinds.base import Spec


class Capability(ABC):  # noqa: B024  (its subclasses declare the members)
    """A capability: a class has it when it (or a base) defines every public member declared in
    the capability's body; no kind subclasses one."""

    members: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.members = tuple(name for name, value in vars(cls).items()
                            if not name.startswith("_") and name != "members"
                            and (callable(value) or isinstance(value, property)))

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if not cls.members:
            return NotImplemented
        defined = set().union(*(vars(base) for base in other.__mro__))
        return all(name in defined for name in cls.members) or NotImplemented


class EncodedImage(Capability):
    """An encoded image (JPEG, PNG ...) read by the loader's image decoder: the first image
    field declared is the dataset's records (prepared by the pack's image path, decoded by
    the fused path), a further one is a bytes column decoded with the loader's transforms."""

    @abstractmethod
    def decode_problem(self, data: bytes | memoryview, shape: tuple[int, int]) -> str | None:
        """Why data does not decode whole with the loader's decoder to shape (H, W), or None."""


class Clips(Capability):
    """Encoded files stored as given (audio clips, videos): in a dataset without images the
    first such field is the records, read by a loader of their own."""

    @property
    @abstractmethod
    def loaded_by(self) -> tuple[str, str] | None:
        """(what its values are called, the FastLoader argument that loads them), as the
        other loaders' refusals name them: ("audio clips", "audio=fastloader.Audio(...)")."""

    @abstractmethod
    def record_shape(self, spec: Spec, stored: Any) -> tuple[int, int]:
        """The index's (N, 2) shape row of a stored value as the records (each >= 1)."""


class Facts(Capability):
    """Int64 facts kept per sample beside the value, in an (N, len(meta)) meta column read
    without the value (audio: sample_rate, channels, frames); store() returns WithMeta. The
    records field keeps its meta column too."""

    @property
    @abstractmethod
    def meta(self) -> tuple[str, ...]:
        """The facts' names, the meta column's columns."""

    @abstractmethod
    def facts(self, data: bytes) -> tuple[int, ...]:
        """The meta row of a value's bytes (DecodeError saying why they are not whole)."""


class Arrays(Capability):
    """A numeric array per sample of its field's dtype and shape (ndarray, boxes): one (N, ...)
    column when the shape is fixed, values + offsets + shapes with a -1; read back as arrays."""

    @abstractmethod
    def as_array(self, spec: Spec, value: object) -> np.ndarray:
        """value as a contiguous array of the field's dtype and shape; BadValue if it does not
        fit."""


class HoldsBoxes(Capability):
    """XYXY boxes that follow the batch's crop and flip: RandomIoUCrop plans from them, and
    their per-box fields drop the rows of the boxes a crop drops."""

    @abstractmethod
    def map_batch(self, boxes: list[np.ndarray], geometry: Geometry, min_visibility: float,
                  device: torch.device) -> tuple[list[torch.Tensor], list[np.ndarray]]:
        """A batch's boxes in output pixels on device, and each sample's keep mask."""


class Raster(Capability):
    """A label image the size of its sample's image, mapped through the batch's crop and flip
    by the producer's mask thread."""

    @abstractmethod
    def map_into(self, blob: Any, image_size: tuple[int, int], crop: np.ndarray, flip: bool,
                 out: np.ndarray, orientation: int = 1) -> None:
        """A stored raster mapped through one sample's crop and flip into out (turned first by
        its image's EXIF orientation)."""


def is_records(kind: object) -> bool:
    """Whether a field of this kind may be the dataset's records (stored in the shards, one a
    sample): an image, or clips in a dataset without images."""
    return isinstance(kind, (EncodedImage, Clips))


def loaded_by(kind: object, otherwise: str) -> tuple[str, str]:
    """(what a records kind's values are called, the FastLoader argument that loads them), as
    a loader that does not read them names them in its refusal; a kind no loader argument
    reads is "<kind> values", loaded by `otherwise`."""
    named = kind.loaded_by if isinstance(kind, Clips) else None
    return named or (f"{kind} values", otherwise)
