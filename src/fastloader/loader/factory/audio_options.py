"""fastloader.Audio: how the audio loader turns stored clips into a batch (rate, channels, crop),
the duration-batching arguments' checks, and the audio loader's options (AudioOptions, and
AudioArgs for FastLoader's typed overload); all checked before anything is opened."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastloader.checks import flag, positive_int
from fastloader.errors import invalid_argument, invalid_type
from fastloader.gpu.mel import LogMel
from fastloader.loader.factory.keywords import ClipArgs
from fastloader.loader.factory.options import ClipOptions

QUALITIES = ("QQ", "LQ", "MQ", "HQ", "VHQ")  # soxr's quality recipes
DTYPES = ("float32", "int16")


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid_type(name, value, "a number of seconds")
    if not math.isfinite(value) or value <= 0:
        raise invalid_argument(name, value, "must be a finite number of seconds > 0",
                               f"Pass e.g. {name}=2.0.")
    return float(value)


@dataclass(frozen=True)
class Audio:
    """How the audio loader decodes each clip of a packed audio dataset into its batch.

    A batch's audio is float32 (or int16) `[B, C, T]` (zero-padded after each clip's end) with its
    lengths, int64 `[B]`, the frames of each clip that are real. Each clip is decoded from
    its stored bytes seeking to its crop (only the frames needed), resampled with soxr and
    mixed down (or given its channels) on the loader's threads.

    Args:
        sample_rate: the output rate in Hz; clips at another rate are resampled. None keeps
            each clip's rate (a batch's clips must then share one).
        mono: mix every clip down to one channel (the mean of its channels).
        channels: with mono=False, the channels every clip comes with (a mono clip is
            repeated; a clip with other channels is an error); None keeps each clip's (a
            batch's clips must then agree).
        crop_seconds: cut each clip to this many seconds (T is then always
            round(crop_seconds * sample_rate); shorter clips are zero-padded); None: whole clips
            (T is the batch's longest).
        random_crop: with crop_seconds, a crop start drawn uniformly from (seed, epoch,
            sample); False takes the clip's centre window.
        resample_quality: soxr's recipe: "QQ", "LQ", "MQ", "HQ" (default) or "VHQ".
        dtype: "float32" (default; samples in [-1, 1]) or "int16" (round(x * 32767),
            clipped; half the memory and copy).
        log_mel: a fastloader.LogMel: each batch's audio is then (log-mel features
            [B, C, n_mels, frames], frame lengths int64 [B]), computed on the loader's device
            after the copy; None: the waveforms and their lengths.

    Raises:
        InvalidArgumentError: a value is out of range.
        InvalidTypeError: a value has the wrong type.
    """

    sample_rate: int | None = 16000
    mono: bool = True
    channels: int | None = None
    crop_seconds: float | None = None
    random_crop: bool = False
    resample_quality: str = "HQ"
    dtype: str = "float32"
    log_mel: LogMel | None = None

    def __post_init__(self) -> None:
        if self.sample_rate is not None:
            positive_int("Audio(sample_rate)", self.sample_rate)
        flag("Audio(mono)", self.mono)
        flag("Audio(random_crop)", self.random_crop)
        if self.channels is not None:
            positive_int("Audio(channels)", self.channels)
            if self.mono and self.channels != 1:
                raise invalid_argument("Audio(channels)", self.channels,
                                       "asks for channels while mono=True mixes them to one",
                                       "Pass mono=False with channels=.")
        if self.crop_seconds is not None:
            _seconds("Audio(crop_seconds)", self.crop_seconds)
        if self.random_crop and self.crop_seconds is None:
            raise invalid_argument("Audio(random_crop)", True, "needs crop_seconds",
                                   "Pass crop_seconds=SECONDS with random_crop=True.")
        if self.resample_quality not in QUALITIES:
            raise invalid_argument("Audio(resample_quality)", self.resample_quality,
                                   f"must be one of {QUALITIES}", "Pass 'HQ' (soxr's default).")

        if self.dtype not in DTYPES:
            raise invalid_argument("Audio(dtype)", self.dtype, f"must be one of {DTYPES}",
                                   "Pass 'float32', or 'int16' for half the memory.")
        self._check_log_mel()

    def _check_log_mel(self) -> None:
        if self.log_mel is None:
            return
        if not isinstance(self.log_mel, LogMel):
            raise invalid_type("Audio(log_mel)", self.log_mel, "a fastloader.LogMel(...)")
        if self.log_mel.sample_rate != self.sample_rate:
            raise invalid_argument("Audio(log_mel)", self.log_mel,
                                   f"is for {self.log_mel.sample_rate} Hz, the loader gives "
                                   f"{self.sample_rate or 'each clip its own rate'}",
                                   "Pass the same sample_rate to Audio and LogMel.")

    def out_channels(self, stored: int) -> int:
        """Channels a clip with `stored` channels comes out with."""
        return 1 if self.mono else (self.channels or stored)


def check_audio(audio: object) -> Audio | None:
    """FastLoader's audio= argument: an Audio, or None."""
    if audio is not None and not isinstance(audio, Audio):
        raise invalid_type("audio", audio, "a fastloader.Audio(...)")
    return audio


def check_duration_args(max_batch_seconds: object, buckets: object, batch_size: object) -> None:
    """max_batch_seconds (None, or seconds > 0), duration_buckets (>= 1), and batch_size left
    at 1 with max_batch_seconds (a duration plan sets each batch's count)."""
    positive_int("duration_buckets", buckets)
    if max_batch_seconds is None:
        return
    _seconds("max_batch_seconds", max_batch_seconds)
    if batch_size != 1:
        raise invalid_argument("batch_size", batch_size,
                               "cannot be set with max_batch_seconds (the duration plan "
                               "chooses each batch's size)", "Drop batch_size=.")


@dataclass
class AudioOptions(ClipOptions):
    """The audio loader's options (FastLoader(..., audio=fastloader.Audio(...)), a packed
    dataset of clips): `audio` and the duration plan's arguments, checked here."""

    audio: Audio | None = None
    max_batch_seconds: float | None = None
    duration_buckets: int = 8

    def _check_own(self) -> None:
        self.spec = check_audio(self.audio) or Audio()
        check_duration_args(self.max_batch_seconds, self.duration_buckets, self.batch_size)

    def plan_limits(self) -> tuple[float | None, int]:
        return self.max_batch_seconds, self.duration_buckets


class AudioArgs(ClipArgs, total=False):
    """The audio loader's keywords besides audio= (AudioOptions), for FastLoader's overload."""

    max_batch_seconds: float | None
    duration_buckets: int
