"""Field kinds, one class each (base.py says what a Kind knows, capabilities.py what some can
do besides), registered in this order."""

from __future__ import annotations

from fastloader.format.kinds.arrays import NdarrayKind
from fastloader.format.kinds.audio import AudioKind
from fastloader.format.kinds.base import (
    BadValue,
    Batch,
    Kind,
    RecordImage,
    StoreContext,
    WithMeta,
    find,
    get,
    names,
    register,
    unregister,
)
from fastloader.format.kinds.blobs import BytesKind, JsonKind, TextKind
from fastloader.format.kinds.boxes import BoxesKind
from fastloader.format.kinds.capabilities import (
    Arrays,
    Clips,
    EncodedImage,
    Facts,
    HoldsBoxes,
    Raster,
    is_records,
    loaded_by,
)
from fastloader.format.kinds.encoded import EncodedKind, encoded_kinds
from fastloader.format.kinds.image import ImageKind
from fastloader.format.kinds.mask import MaskKind
from fastloader.format.kinds.scalars import FloatKind, IntKind
from fastloader.format.kinds.video import VideoKind

# the order error messages and the CLI's help list them in
IMAGE = register(ImageKind("image"))
INT = register(IntKind("int"))
FLOAT = register(FloatKind("float"))
NDARRAY = register(NdarrayKind("ndarray"))
BOXES = register(BoxesKind("boxes"))
MASK = register(MaskKind("mask"))
TEXT = register(TextKind("text"))
BYTES = register(BytesKind("bytes"))
JSON = register(JsonKind("json"))
AUDIO = register(AudioKind("audio"))
VIDEO = register(VideoKind("video"))

__all__ = ["AUDIO", "BOXES", "BYTES", "FLOAT", "IMAGE", "INT", "JSON", "MASK", "NDARRAY",
           "TEXT", "VIDEO", "Arrays", "BadValue", "Batch", "Clips", "EncodedImage", "EncodedKind",
           "Facts", "HoldsBoxes", "Kind", "Raster", "RecordImage", "StoreContext", "WithMeta",
           "encoded_kinds", "find", "get", "is_records", "loaded_by", "names", "register",
           "unregister"]
