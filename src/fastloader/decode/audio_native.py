"""The native FLAC and WAV decoders (csrc/audio_*.cpp) behind decode/audio.py, and the rule for
what they leave to libsndfile.

The extension reads FLAC (8/16/24-bit, any channels, fixed or variable blocks, with a sample
count in STREAMINFO; an ID3v2 tag before "fLaC" is skipped) and WAV (RIFF/WAVE, PCM 8/16/24/32
and IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE too), seeking to the crop without decoding from
the start (FLAC: a search for frame headers), with the GIL released, into the caller's array:
float32 exactly as libsndfile gives it. The rule: every other clip (MP3, Ogg, a WAV codec or a
FLAC feature it does not implement, e.g. 12/20/32-bit samples, or a mix of 8 or more channels to
mono, which numpy's mean sums pairwise) comes back as LEFT, and only
then the caller decodes it with soundfile; damaged bytes are a DecodeError, never a fallback.
FASTLOADER_DISABLE_NATIVE=1 (or no extension) leaves every clip to soundfile.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from fastloader.decode._native import native_module
from fastloader.decode.record import Record
from fastloader.errors import DecodeError

DECODED, LEFT, DAMAGED = 0, 1, 2  # audio_decode's and audio_info's status


def core() -> ModuleType | None:
    """The extension when it is usable and has the audio decoders, else None."""
    module = native_module()
    return module if module is not None and hasattr(module, "audio_decode") else None


def _checked(status: int, why: str) -> bool:
    """True where the native decoder did the work; False where it leaves the clip to
    libsndfile; DecodeError where the bytes are damaged."""
    if status == DAMAGED:
        raise DecodeError(f"does not decode ({why})")
    return status == DECODED


def decode_into(data: Record, start: int, frames: int, out: np.ndarray, mono: bool) -> int | None:
    """Frames from `start` written into out [C, >= frames] float32 (any strides; mono: the
    channels' mean, C 1; else C the clip's channels, or a mono clip repeated): how many
    (fewer when the clip ends first), or None when the clip is left to libsndfile."""
    module = core()
    if module is None:
        return None
    status, got, _, _, why = module.audio_decode(data, start, frames, out, mono)
    return int(got) if _checked(status, why) else None


def decode(data: Record, start: int, frames: int) -> np.ndarray | None:
    """float32 [frames, channels] from `start` (fewer rows when the clip ends first), or None
    when the clip is left to libsndfile."""
    module = core()
    if module is None:
        return None
    status, _, channels, total, why = module.audio_info(data)
    if not _checked(status, why):
        return None
    wave = np.empty((max(0, min(frames, total - start)), channels), np.float32)
    got = decode_into(data, start, wave.shape[0], wave.T, False)
    return None if got is None else wave[:got]
