"""Audio clips: their header facts, a decode that seeks to the crop, resampling and channel mix.

FLAC and WAV decode natively (decode/audio_native.py: the extension's own decoders, which leave
any other clip to libsndfile by an explicit status); the rest as below.
libsndfile (through `soundfile`) reads WAV, FLAC, MP3 and Ogg Vorbis/Opus from the bytes as
stored; `soxr` resamples. Both are the optional extra `audio`, imported on first use. Both
release the GIL inside their C calls (soundfile is a cffi ABI binding, and cffi drops the GIL
around every C call; soxr's extension releases it around the resampler):
benchmarks/bench_audio.py --gil measures it. But libsndfile reading a Python file object (a
BytesIO) calls back into Python, taking the GIL, for every read: threads decoding from BytesIO
barely ran in parallel here (2 threads: 1.09x one, against 1.30x from a file path, median of 6
on the shared 2-core machine). So on Linux each thread copies its clip into its own memory file
(memfd) and libsndfile reads that with its own read() calls, as it reads a path (1.30x).
The copy costs the whole clip's bytes, a BytesIO only the bytes a seek reads: a short crop of a
long clip (less than half of it) is read through the BytesIO (an A/B of 2 s crops of 1-12 s
FLAC clips ran at 0.8-0.93x through memfds).
"""

from __future__ import annotations

import io
import os
import threading
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from fastloader.decode import audio_native
from fastloader.decode.record import Record
from fastloader.errors import DecodeError, OptionalDependencyError

AUDIO_EXTENSIONS = (".flac", ".wav", ".mp3", ".ogg", ".opus")
EXTRA_FIX = "pip install 'fastloader[audio]'"


def soundfile() -> ModuleType:
    """The soundfile module; OptionalDependencyError naming the extra if it is missing."""
    try:
        import soundfile as sf
    except (ImportError, OSError) as exc:  # OSError: the module without its libsndfile
        raise OptionalDependencyError(
            f"audio fields need soundfile (libsndfile) ({exc}); {EXTRA_FIX}") from None
    return sf


def _soxr() -> ModuleType:
    try:
        import soxr
    except ImportError as exc:
        raise OptionalDependencyError(
            f"resampling audio needs soxr ({exc}); {EXTRA_FIX}") from None
    return soxr


def _why(exc: Exception) -> str:
    """libsndfile's own words, without the file object's repr soundfile puts before them."""
    return str(getattr(exc, "error_string", "") or exc).rpartition(">: ")[2]


class ClipInfo(NamedTuple):
    """What a clip's header says: its sample rate (Hz), channels and frames."""

    sample_rate: int
    channels: int
    frames: int


def probe(data: bytes) -> ClipInfo:
    """The clip's header facts; DecodeError if libsndfile cannot open it or it is empty."""
    sf = soundfile()
    try:
        info = sf.info(io.BytesIO(data))
    except (RuntimeError, sf.LibsndfileError) as exc:
        raise DecodeError(f"not an audio clip libsndfile reads ({_why(exc)})") from None
    if info.frames < 1 or info.channels < 1 or info.samplerate < 1:
        raise DecodeError(f"an empty clip ({info.frames} frames, {info.channels} channels at "
                          f"{info.samplerate} Hz)")
    return ClipInfo(int(info.samplerate), int(info.channels), int(info.frames))


def check(data: bytes, info: ClipInfo) -> str | None:
    """Why the whole clip does not decode to its header's frames, or None (pack, verify)."""
    try:
        clip = decode(data, 0, info.frames)
    except DecodeError as exc:
        return str(exc)
    if clip.shape != (info.frames, info.channels):
        return (f"decodes to {clip.shape[0]} frames of {clip.shape[1]} channels, its header "
                f"says {info.frames} of {info.channels}")
    return None


class _MemoryFile:
    """A thread's memory file (memfd), closed with the thread (its threading.local goes)."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("fastloader-clip", os.MFD_CLOEXEC)

    def holding(self, data: Record) -> int:
        """The fd, holding exactly `data`, positioned at its start (libsndfile takes the
        position it is opened at as the file's start)."""
        view = memoryview(data).cast("B")
        os.ftruncate(self.fd, len(view))
        written = 0
        while written < len(view):
            written += os.pwrite(self.fd, view[written:], written)
        os.lseek(self.fd, 0, os.SEEK_SET)
        return self.fd

    def __del__(self) -> None:
        os.close(self.fd)


_threads = threading.local()


def _renew_after_fork() -> None:  # a child shares the parent's memfds (and their offsets)
    global _threads
    _threads = threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_after_fork)


def _opened(sf: ModuleType, data: Record, copy: bool) -> Any:  # an untyped SoundFile
    """A SoundFile over data: this thread's memory file where the OS has them and `copy`
    asks for one, else a BytesIO (Python callbacks, holding the GIL, serve libsndfile's
    reads)."""
    if not copy or not hasattr(os, "memfd_create"):
        return sf.SoundFile(io.BytesIO(data))
    memory = getattr(_threads, "memory", None)
    if memory is None:
        memory = _threads.memory = _MemoryFile()
    return sf.SoundFile(memory.holding(data), closefd=False)


def decode(data: Record, start: int, frames: int, out: np.ndarray | None = None,
           copy: bool = True) -> np.ndarray:
    """float32 [frames, channels] from frame `start`, seeking there (only the frames needed
    are decoded); fewer rows when the clip ends first. DecodeError if the data is damaged.
    `out`: a C-contiguous float32 [frames, channels] libsndfile writes into (no copy); the
    rows it filled are returned. `copy`: read it from this thread's memory file (most of
    the clip is read) rather than a BytesIO (a short crop)."""
    if out is None:
        wave = audio_native.decode(data, start, frames)
        if wave is not None:
            return wave
    else:
        got = audio_native.decode_into(data, start, frames, out.T, False)
        if got is not None:
            return out[:got]
    sf = soundfile()
    try:
        with _opened(sf, data, copy) as clip:
            if start:
                clip.seek(start)
            if out is not None:
                return clip.read(frames, dtype="float32", always_2d=True, out=out)
            return clip.read(frames, dtype="float32", always_2d=True)
    except (RuntimeError, sf.LibsndfileError, ValueError) as exc:
        raise DecodeError(f"does not decode ({_why(exc)})") from None


def resample(clip: np.ndarray, rate: int, target: int, quality: str) -> np.ndarray:
    """clip [frames, channels] at `rate` Hz as float32 at `target` Hz (soxr, `quality`)."""
    if rate == target:
        return clip
    out = _soxr().resample(clip, rate, target, quality=quality)
    return np.asarray(out, np.float32).reshape(-1, clip.shape[1])


def mix(clip: np.ndarray, mono: bool, channels: int | None) -> np.ndarray:
    """clip [frames, C] as [frames, 1] (mono: the channels' mean) or `channels` channels (a
    mono clip repeated; more channels than a clip has: DecodeError), or as it is."""
    if mono:
        return clip if clip.shape[1] == 1 else clip.mean(axis=1, keepdims=True, dtype=np.float32)
    if channels is None or clip.shape[1] == channels:
        return clip
    if clip.shape[1] == 1:
        return np.repeat(clip, channels, axis=1)
    raise DecodeError(f"has {clip.shape[1]} channels, the loader wants {channels}")


def output_frames(frames: int, rate: int, target: int) -> int:
    """Frames a resample of `frames` at `rate` to `target` gives, to within one: soxr's
    one-shot length is frames * target / rate rounded half up, computed in floating point."""
    return frames if rate == target else (2 * frames * target + rate) // (2 * rate)


# How many leading bytes container() looks at (an Ogg stream names its codec in its first page)
CONTAINER_HEAD = 64


def container(head: bytes) -> str:
    """The container (and, in Ogg, the codec) a clip's first CONTAINER_HEAD bytes name: "WAV",
    "FLAC", "MP3", "OPUS", "VORBIS", "OGG", "AIFF", or "OTHER" for what the magic does not say."""
    if head[:4] in (b"RIFF", b"RIFX", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        return "WAV"
    if head[:4] == b"fLaC":
        return "FLAC"
    if head[:4] == b"OggS":
        return ("OPUS" if b"OpusHead" in head else "VORBIS" if b"\x01vorbis" in head
                else "OGG")
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "AIFF"
    # an ID3 tag, or an MPEG audio frame's 11 sync bits
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "MP3"
    return "OTHER"
