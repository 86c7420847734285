"""The audio kind: an encoded clip per sample (WAV, FLAC, MP3, Ogg Vorbis/Opus) stored as given,
never re-encoded, with its sample rate, channels and frames in the field's meta column, so the
loader plans crops and batches by duration without opening a clip. In a dataset without images
the first audio field is the records (the shards); otherwise it is a bytes column. Checked at
pack time by a whole decode (decode/audio.py); `packdata verify --decode` decodes each again."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastloader.decode import audio
from fastloader.errors import DecodeError
from fastloader.format.kinds.base import Spec, WithMeta
from fastloader.format.kinds.encoded import EncodedKind, seconds_line, spread

META = ("sample_rate", "channels", "frames")


class AudioKind(EncodedKind):
    """Encoded audio bytes (or a path to them), decoded once at pack time to prove them whole."""

    loaded_by = ("audio clips", "audio=fastloader.Audio(...)")
    meta = META
    feature = "Audio"
    extensions = audio.AUDIO_EXTENSIONS
    columns = ("audio", "audio_filepath", "audio_path")  # NeMo manifests: audio_filepath

    def describe(self, spec: Spec) -> str:
        return "audio (encoded clip)"

    def facts(self, data: bytes) -> tuple[int, ...]:
        """(sample_rate, channels, frames) from the header, proven by a whole decode."""
        info = audio.probe(data)
        problem = audio.check(data, info)
        if problem is not None:
            raise DecodeError(problem)
        return tuple(info)

    def record_shape(self, spec: Spec, stored: WithMeta) -> tuple[int, int]:
        _, channels, frames = stored.meta
        return channels, frames

    codecs_read = 4096  # a clip's container is in its first bytes: cheap to read

    def summary(self, meta: np.ndarray) -> dict[str, Any]:
        return summary(meta)

    def summary_lines(self, clips: dict[str, Any]) -> list[str]:
        def counts(histogram: dict[str, int], unit: str) -> str:
            return ", ".join(f"{k}{unit} {n}" for k, n in histogram.items())

        return [f"audio     {clips['clips']} clips, {clips['hours']:.2f} hours",
                seconds_line(clips["seconds"]),
                f"rates     {counts(clips['sample_rates'], ' Hz')}",
                f"channels  {counts(clips['channels'], 'ch')}"]

    def codec(self, record: bytes | memoryview) -> str:
        """The container (and, in Ogg, the codec) its first bytes name."""
        return audio.container(bytes(record[:audio.CONTAINER_HEAD]))

    def check_column(self, spec: Spec, arrays: dict[str, np.ndarray]) -> str | None:
        meta = arrays.get("meta")
        if meta is not None and meta.size and int(meta.min()) < 1:
            return "a clip's sample rate, channels or frames in its meta column is below 1"
        return None


def summary(meta: np.ndarray) -> dict[str, Any]:
    """`packdata info`'s account of a clip field from its (N, 3) meta: clips, total hours,
    seconds per clip (min, median, mean, max), and histograms of rates and channels."""
    rates, channels = meta[:, 0].astype(np.int64), meta[:, 1].astype(np.int64)
    seconds = meta[:, 2].astype(np.float64) / np.maximum(rates, 1)

    def histogram(values: np.ndarray) -> dict[str, int]:
        keys, counts = np.unique(values, return_counts=True)
        return {str(k): int(n) for k, n in zip(keys.tolist(), counts.tolist(), strict=True)}

    return {
        "clips": int(seconds.size),
        "hours": round(float(seconds.sum()) / 3600, 4),
        "seconds": spread(seconds),
        "sample_rates": histogram(rates),
        "channels": histogram(channels),
    }
