"""The Kind of a field: everything one kind of value means, in one class, and their registry.

A Kind is a str (its name: "image", "boxes", ...), so a FieldSpec's `kind` still equals and
hashes as the name and is written to manifest.json as it. Its methods are an encoder and a
decoder: at pack time how a value is checked and stored and what goes in the index (variable,
storage_dtype), at open and load time how it is read from its column, verified, collated into a
batch and moved to the device. What only some kinds can do (boxes that follow the crop plan,
clips with their own loader ...) is a capability, a protocol of capabilities.py the kind meets
by having its members. The pack and loader stages call these and pass what only they hold
(reading files, decoding images; the batch being collated) through the small protocols below,
so format/ imports neither. register() adds a kind; get() resolves a name. Adding a kind is one
module: see ARCHITECTURE.md, "How to add a field kind".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, TypeVar

import numpy as np

from fastloader.format.kinds.device import to_tensor

if TYPE_CHECKING:
    import torch


Bad = Callable[[str], Exception]


class BadValue(Exception):
    """A value that does not fit its field (pack time); the message says why."""


class WithMeta(NamedTuple):
    """A stored value and its per-sample facts, as store() returns them for a kind with
    `meta` (the facts go to the field's (N, len(meta)) int64 meta column)."""

    value: Any
    meta: tuple[int, ...]


class Spec(Protocol):
    """What a kind reads of a field's declaration (format/fields.py's FieldSpec)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> Kind: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def shape(self) -> tuple[int, ...] | None: ...
    @property
    def classes(self) -> tuple[str, ...] | None: ...
    @property
    def per_box(self) -> tuple[str, ...]: ...
    @property
    def variable(self) -> bool: ...


class StoreContext(Protocol):
    """What the pack stage lends a kind to store a value: reading a source, checking an image."""

    def read(self, value: Any) -> bytes:
        """The bytes of an image value (bytes, a path, a tar member); BadValue if unreadable."""

    def read_file(self, path: str) -> bytes:
        """A file's bytes under the pack's size cap (ValueError over it, OSError unreadable)."""

    def check_image(self, data: bytes) -> str | None:
        """Why data is not a decodable image, or None."""


class RecordImage(Protocol):
    """The sample's record image as the pack stage stored it."""

    height: int
    width: int
    reencoded: bool  # --max-side re-encoded it: stored at (height, width), not its source's

    def source_size(self) -> tuple[int, int]:
        """(height, width) of the source image before any re-encode."""


class Batch(Protocol):
    """What the loader's collator lends a kind to build one column of a batch."""

    padded: bool
    multi_hot: dict[str, int]

    def values(self, name: str, indices: np.ndarray) -> Any:
        """The batch's stored values of field name (per-box rows of dropped boxes dropped)."""

    def boxes(self, name: str) -> list[torch.Tensor]:
        """Boxes field name mapped through the batch's crop plan, on the device."""

    def mask(self, name: str, device: torch.device) -> torch.Tensor:
        """Mask field name mapped through the batch's crop plan, uint8 [B, H, W] on device."""

    def decode_images(self, name: str, records: list[bytes], indices: np.ndarray,
                      device: torch.device) -> torch.Tensor | None:
        """A further image field decoded with the loader's transforms (None: no decoder)."""


class Kind(str):
    """One field kind. Subclass it, override what differs, add the members of the capabilities
    it has, register()."""

    # What a kind can do beyond the methods below is a capability (capabilities.py:
    # EncodedImage, Clips, Facts, Arrays, HoldsBoxes, Raster): it has the protocol's members,
    # and callers ask isinstance(kind, HoldsBoxes) where they need it.
    takes_classes: ClassVar[bool] = False  # may carry class names (a label)
    verified: ClassVar[bool] = False  # `packdata verify` reads every value back
    cell_is_path: ClassVar[bool] = False  # a table cell holds a file path (relative)
    codecs_read: ClassVar[int] = 0  # records `packdata info` reads at most (spread evenly)
    # to name their codecs with codec(), for a records kind whose index keeps none

    @property
    def name(self) -> str:
        """The kind's name, a plain str."""
        return str.__str__(self)

    # `packdata info`: a records kind's own account instead of image sizes

    def summary(self, meta: np.ndarray) -> dict[str, Any] | None:
        """The records' account from their (N, len(meta)) meta column (clips, hours ...),
        JSON-ready, shown instead of image sizes; None: the kind has none (image sizes)."""
        return None

    def summary_lines(self, summary: dict[str, Any]) -> list[str]:
        """summary()'s text lines."""
        return []

    def codec(self, record: bytes | memoryview) -> str:
        """The codec (or container) one stored record is in, when codecs_read > 0."""
        return "OTHER"

    # declared: what a user writes and what manifest.json holds

    def from_tuple(self, items: tuple[Any, ...] | list[Any]) -> dict[str, Any] | None:
        """A tuple spec such as ("ndarray", DTYPE, SHAPE) as a manifest-style dict (None:
        this kind has no tuple form of that length)."""
        return None

    def build(self, name: str, entry: Any, bad: type[Exception], where: str) -> dict[str, Any]:
        """FieldSpec's dtype / shape / per_box from a manifest-style entry; raise bad."""
        return {}

    def to_json(self, spec: Spec) -> dict[str, Any]:
        """This kind's own keys of the field's manifest entry (beside name, kind, classes)."""
        return {}

    def describe(self, spec: Spec) -> str:
        """'ndarray float32 (512,)', 'text', ..."""
        return self.name

    def bare(self) -> str | tuple[Any, ...]:
        """What a field given by this kind's bare name stands for where its values are read
        before its declaration is final (a WebDataset's members): the name itself."""
        return self.name

    # pack time: what goes in the index

    def variable(self, spec: Spec) -> bool:
        """Stored as values + offsets (a run of bytes or array items per sample), not as one
        (N, ...) array."""
        return True

    def storage_dtype(self, spec: Spec) -> str:
        """The dtype of the stored values: the field's declared dtype, else bytes."""
        return spec.dtype or "uint8"

    # pack time: a value

    def store(self, spec: Spec, value: Any, ctx: StoreContext) -> Any:
        """value in its stored form (int, float, an ndarray of the field's dtype, or bytes);
        BadValue if it does not fit."""
        raise BadValue(f"kind {self.name} stores no values")  # pragma: no cover

    def check_rows(self, spec: Spec, values: dict[str, Any]) -> str | None:
        """Why the sample's stored values disagree with this field's (None: they agree)."""
        return None

    def fit_image(self, spec: Spec, value: Any, image: RecordImage) -> tuple[Any, str | None]:
        """The stored value once its record image is known (its size), or why it does not fit."""
        return value, None

    def from_bytes(self, spec: Spec, data: bytes) -> Any:
        """A file's bytes (a WebDataset member) as a value of this kind; ValueError if not."""
        return data

    def from_member(self, spec: Spec, member: Any, read: Callable[[Any], bytes],
                    deferred: bool) -> Any:
        """A file group member as a value: read now, or (deferred: a path or tar member the
        pool worker can read) later by store()."""
        return self.from_bytes(spec, read(member))

    def from_cell(self, spec: Spec, value: Any, from_csv: bool) -> Any:
        """A table cell (None: empty; a CSV cell is text) as a value; ValueError if not."""
        if value is None:
            raise ValueError(f"is empty; an {self.name} needs a value (declare the column float "
                             "to read empty cells as NaN, or pass skip_bad=True)")
        return value

    # open time

    def check_column(self, spec: Spec, arrays: dict[str, np.ndarray]) -> str | None:
        """What is wrong with the field's column arrays (role -> array) beyond their shapes,
        dtypes and offsets, which every column is checked for; None: nothing."""
        return None

    def load(self, spec: Spec, blob: np.ndarray, shape: Any, fail: Bad) -> Any:
        """A variable field's value from its stored bytes (uint8 view; shape: an array's
        shapes row); fail(why) is the error to raise when they are damaged (why names the
        field: "field 'caption' is not valid UTF-8 (...)")."""
        return blob.tobytes()

    def verify(self, spec: Spec, value: Any, image_size: tuple[int, int],
               decode: Callable[[bytes], str | None] | None) -> str | None:
        """Why a value read back is bad (`packdata verify`), or None; decode checks an image."""
        return None

    # load time

    def collate(self, spec: Spec, batch: Batch, indices: np.ndarray,
                device: torch.device) -> Any:
        """The batch's column of field spec: a tensor on device, or a list of values."""
        return batch.values(spec.name, indices)


class Fixed(Kind):
    """A kind stored as one (N, ...) array of a fixed dtype and collated to a tensor."""

    def variable(self, spec: Spec) -> bool:
        return False

    def collate(self, spec: Spec, batch: Batch, indices: np.ndarray,
                device: torch.device) -> Any:
        return to_tensor(batch.values(spec.name, indices), device)


def utf8(spec: Spec, blob: np.ndarray, fail: Bad, parse: bool) -> Any:
    """A stored text (parse: JSON) value; fail(why) when damaged."""
    try:
        text = blob.tobytes().decode("utf-8")
        return json.loads(text) if parse else text
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise fail(f"field {spec.name!r} is not valid {'JSON' if parse else 'UTF-8'} "
                   f"({exc})") from None


_REGISTRY: dict[str, Kind] = {}
K = TypeVar("K", bound=Kind)


def register(kind: K) -> K:
    """Add a kind (its name must be new); returns it."""
    if kind.name in _REGISTRY:
        raise ValueError(f"a field kind named {kind.name!r} is registered already")
    _REGISTRY[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove a registered kind (a test's toy kind)."""
    _REGISTRY.pop(name, None)


def find(name: Any) -> Kind | None:
    """The registered kind of that name, or None."""
    return _REGISTRY.get(name) if isinstance(name, str) else None


def get(name: str) -> Kind:
    """The registered kind of that name; KeyError naming the kinds there are."""
    kind = find(name)
    if kind is None:
        raise KeyError(f"no field kind {name!r}; the kinds are {', '.join(names())}")
    return kind


def names() -> tuple[str, ...]:
    """Every registered kind's name, in registration order."""
    return tuple(_REGISTRY)
