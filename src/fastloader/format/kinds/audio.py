"""The audio kind: an encoded clip per sample (WAV, FLAC, MP3, Ogg Vorbis/Opus) stored as given,
never re-encoded, with its sample rate, channels and frames in the field's meta column, so the
loader plans crops and batches by duration without opening a clip. In a dataset without images
the first audio field is the records (the shards); otherwise it is a bytes column. Checked at
pack time by a whole decode (decode/audio.py); `packdata verify --decode` decodes each again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastloader.decode import audio
from fastloader.errors import DecodeError
from fastloader.format.kinds.base import Bad, BadValue, Kind, Spec, StoreContext, WithMeta

META = ("sample_rate", "channels", "frames")


class AudioKind(Kind):
    """Encoded audio bytes (or a path to them), decoded once at pack time to prove them whole."""

    records = True  # the records of a dataset without images
    loaded_by = ("audio clips", "audio=fastloader.Audio(...)")
    meta = META
    verified = True  # with `packdata verify --decode`, each clip is decoded again
    cell_is_path = True

    def describe(self, spec: Spec) -> str:
        return "audio (encoded clip)"

    def store(self, spec: Spec, value: Any, ctx: StoreContext) -> WithMeta:
        """The bytes as given, with (sample_rate, channels, frames) from a whole decode."""
        if isinstance(value, WithMeta):  # a resumed pack's journal: checked already
            return value
        data = ctx.read(value)
        try:
            info = audio.probe(data)
        except DecodeError as exc:
            raise BadValue(str(exc)) from None
        problem = audio.check(data, info)
        if problem is not None:
            raise BadValue(problem)
        return WithMeta(data, tuple(info))

    def record_shape(self, spec: Spec, stored: Any) -> tuple[int, int]:
        _, channels, frames = stored.meta
        return channels, frames

    def from_member(self, spec: Spec, member: Any, read: Callable[[Any], bytes],
                    deferred: bool) -> Any:
        return member if deferred else read(member)

    def from_cell(self, spec: Spec, value: Any, from_csv: bool) -> Any:
        """A clip path; a Hugging Face Audio() cell ({"bytes", "path"}, as `datasets` writes
        Parquet) gives its stored bytes (never decoded), else its path."""
        if isinstance(value, dict) and ("bytes" in value or "path" in value):
            data, path = value.get("bytes"), value.get("path")
            if data:
                return bytes(data)
            if isinstance(path, str) and path:
                return path
            raise ValueError("is an Audio() cell with neither bytes nor a path")
        return super().from_cell(spec, value, from_csv)

    def check_column(self, spec: Spec, arrays: dict[str, np.ndarray]) -> str | None:
        meta = arrays.get("meta")
        if meta is not None and meta.size and int(meta.min()) < 1:
            return "a clip's sample rate, channels or frames in its meta column is below 1"
        return None

    def load(self, spec: Spec, blob: np.ndarray, shape: Any, fail: Bad) -> Any:
        return blob.tobytes()

    def verify(self, spec: Spec, value: Any, image_size: tuple[int, int],
               decode: Callable[[bytes], str | None] | None) -> str | None:
        """With decode (verify --decode), why the clip does not decode to its header's
        frames; the image decoder itself is not used."""
        if decode is None:
            return None
        try:
            return audio.check(value, audio.probe(value))
        except DecodeError as exc:
            return str(exc)


def summary(meta: np.ndarray) -> dict[str, Any]:
    """`packdata info`'s account of a clip field from its (N, 3) meta: clips, total hours,
    seconds per clip (min, median, mean, max), and histograms of rates and channels."""
    rates, channels = meta[:, 0].astype(np.int64), meta[:, 1].astype(np.int64)
    seconds = meta[:, 2].astype(np.float64) / np.maximum(rates, 1)
    empty = seconds.size == 0

    def histogram(values: np.ndarray) -> dict[str, int]:
        keys, counts = np.unique(values, return_counts=True)
        return {str(k): int(n) for k, n in zip(keys.tolist(), counts.tolist(), strict=True)}

    return {
        "clips": int(seconds.size),
        "hours": round(float(seconds.sum()) / 3600, 4),
        "seconds": {"min": 0.0, "median": 0.0, "mean": 0.0, "max": 0.0} if empty else {
            "min": round(float(seconds.min()), 3), "median": round(float(np.median(seconds)), 3),
            "mean": round(float(seconds.mean()), 3), "max": round(float(seconds.max()), 3)},
        "sample_rates": histogram(rates),
        "channels": histogram(channels),
    }
