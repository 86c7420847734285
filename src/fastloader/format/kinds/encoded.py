"""What the kinds of encoded media files (audio clips, videos) share: the file's bytes stored as
given, never re-encoded, with the facts a whole decode proves (the kind's meta) beside them;
read from a path, a tar member or a Hugging Face Audio()/Video() cell; decoded again by
`packdata verify --decode`; told in `packdata info` by their seconds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from fastloader.errors import DecodeError
from fastloader.format.kinds.base import (
    Bad,
    BadValue,
    Kind,
    Spec,
    StoreContext,
    WithMeta,
    find,
    names,
)


class EncodedKind(Kind):
    """A kind of encoded files; a subclass says how its bytes are proven whole (`facts`)."""

    verified = True  # with `packdata verify --decode`, each file is decoded again
    cell_is_path = True
    meta: ClassVar[tuple[str, ...]] = ()  # the facts' names: the meta column's (capabilities.Facts)
    feature: ClassVar[str] = ""  # the Hugging Face feature whose cells it takes ("Audio")
    extensions: ClassVar[tuple[str, ...]] = ()  # its files' suffixes (".flac"): a WebDataset
    # member or a table column of such files is of this kind
    columns: ClassVar[tuple[str, ...]] = ()  # table column names that hold its files
    loaded_by: ClassVar[tuple[str, str] | None] = None  # (what its values are called, the
    # FastLoader argument that loads them) in the other loaders' refusals: capabilities.Clips

    def record_shape(self, spec: Spec, stored: Any) -> tuple[int, int]:
        """The index's (N, 2) shape row of a stored value as the records (each >= 1)."""
        raise NotImplementedError(f"kind {self.name!r} has no record_shape()")

    def facts(self, data: bytes) -> tuple[int, ...]:
        """The meta row of data, from a whole decode; DecodeError saying why it is not whole."""
        raise NotImplementedError(f"kind {self.name!r} has no facts()")

    def store(self, spec: Spec, value: Any, ctx: StoreContext) -> WithMeta:
        """The bytes as given, with their facts."""
        if isinstance(value, WithMeta):  # a resumed pack's journal: checked already
            return value
        data = ctx.read(value)
        try:
            return WithMeta(data, self.facts(data))
        except DecodeError as exc:
            raise BadValue(str(exc)) from None

    def from_member(self, spec: Spec, member: Any, read: Callable[[Any], bytes],
                    deferred: bool) -> Any:
        return member if deferred else read(member)

    def from_cell(self, spec: Spec, value: Any, from_csv: bool) -> Any:
        """A file path; a Hugging Face Audio()/Video() cell ({"bytes", "path"}, as `datasets`
        writes Parquet) gives its stored bytes (never decoded), else its path."""
        if isinstance(value, dict) and ("bytes" in value or "path" in value):
            data, path = value.get("bytes"), value.get("path")
            if data:
                return bytes(data)
            if isinstance(path, str) and path:
                return path
            article = "an" if self.feature[:1] in "AEIOU" else "a"
            raise ValueError(f"is {article} {self.feature}() cell with neither bytes nor a path")
        return super().from_cell(spec, value, from_csv)

    def load(self, spec: Spec, blob: np.ndarray, shape: Any, fail: Bad) -> Any:
        return blob.tobytes()

    def verify(self, spec: Spec, value: Any, image_size: tuple[int, int],
               decode: Callable[[bytes], str | None] | None) -> str | None:
        """With decode (verify --decode), why the file does not decode whole; the image
        decoder itself is not used."""
        if decode is None:
            return None
        try:
            self.facts(bytes(value))
        except DecodeError as exc:
            return str(exc)
        return None


def spread(seconds: np.ndarray) -> dict[str, float]:
    """min, median, mean and max of the files' seconds (zeros when there are none)."""
    if seconds.size == 0:
        return {"min": 0.0, "median": 0.0, "mean": 0.0, "max": 0.0}
    return {"min": round(float(seconds.min()), 3), "median": round(float(np.median(seconds)), 3),
            "mean": round(float(seconds.mean()), 3), "max": round(float(seconds.max()), 3)}


def seconds_line(seconds: dict[str, float]) -> str:
    """`packdata info`'s line of a spread()."""
    return (f"seconds   {seconds['min']:g} min, {seconds['median']:g} median, "
            f"{seconds['max']:g} max")


def encoded_kinds() -> list[EncodedKind]:
    """The registered kinds of encoded files, in registration order (the importers' tables of
    extensions, column names and Hugging Face features are read from them)."""
    return [kind for kind in (find(name) for name in names()) if isinstance(kind, EncodedKind)]
