"""One audio batch: each clip's crop planned from the index (no clip opened), then decoded with a
seek to it, resampled and mixed on the loader's threads, straight into the batch buffer.

The crop of sample i in epoch e is drawn from numpy's PCG64 seeded by (seed, e, i), so it does
not depend on the batch, the rank or the thread count; a replacement under on_error="skip" is
planned the same way, for its own index.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import torch

from fastloader.decode import audio as clips
from fastloader.decode import audio_native
from fastloader.errors import DecodeError
from fastloader.loader.clips.decoding import Failure, decode_rows, replace_failed
from fastloader.loader.factory.audio_options import Audio

log = logging.getLogger(__name__)


class Crop(NamedTuple):
    """Which source frames of a clip are read, and how many output frames they give."""

    start: int
    frames: int
    out_frames: int  # an upper bound: soxr may give one frame fewer


def plan_crop(meta: np.ndarray, index: int, audio: Audio, seed: int, epoch: int) -> Crop:
    """Sample index's crop from its (sample_rate, channels, frames) meta row."""
    rate, _, frames = (int(v) for v in meta[index])
    target = audio.sample_rate or rate
    take = frames
    if audio.crop_seconds is not None:
        take = min(frames, max(1, round(audio.crop_seconds * rate)))
    start = (frames - take) // 2
    if audio.random_crop and take < frames:
        rng = np.random.Generator(np.random.PCG64([seed, epoch, index]))
        start = int(rng.integers(0, frames - take + 1))
    return Crop(start, take, clips.output_frames(take, rate, target) + (rate != target))


class ClipShapes:
    """Each clip's output channels and output-frames bound, computed once with numpy from
    the (N, 3) meta (decode/audio.output_frames' rounding, one frame more when resampled)."""

    def __init__(self, meta: np.ndarray, audio: Audio) -> None:
        rate, stored, frames = (meta[:, k].astype(np.int64) for k in range(3))
        target = rate if audio.sample_rate is None else np.full_like(rate, audio.sample_rate)
        self.rates = rate
        if audio.mono or audio.channels:
            self.channels = np.full_like(stored, 1 if audio.mono else audio.channels)
        else:
            self.channels = stored
        resampled = (2 * frames * target + rate) // (2 * np.maximum(rate, 1)) + 1
        self.frames = np.where(rate == target, frames, resampled)


def batch_shape(shapes: ClipShapes, indices: np.ndarray, audio: Audio) -> tuple[int, int, int]:
    """(B, C, T) of a batch: T the crop's fixed length, else the longest clip's output frames
    (bound), C the output channels (the batch's clips must agree unless mono or channels=)."""
    channels = np.unique(shapes.channels[indices]).tolist()
    rates = np.unique(shapes.rates[indices]).tolist()
    if len(channels) > 1:
        raise DecodeError(f"a batch mixes clips of {channels} channels; pass "
                          "fastloader.Audio(mono=True) or channels=N")
    if audio.sample_rate is None and len(rates) > 1:
        raise DecodeError(f"a batch mixes sample rates {rates}; pass "
                          "fastloader.Audio(sample_rate=HZ) to resample them to one")
    if audio.crop_seconds is not None:
        rate = audio.sample_rate or rates[0]
        return len(indices), channels[0], max(1, round(audio.crop_seconds * rate))
    longest = int(shapes.frames[indices].max()) if len(indices) else 1
    return len(indices), channels[0], longest


class BatchDecoder:
    """Decodes a batch's clips on `threads` threads (libsndfile and soxr release the GIL): the
    clip loader's ClipDecoder for audio; its facts per clip are the lengths, int64 [B].

    Args:
        read: sample index -> its stored bytes (a zero-copy view of the shard).
        meta: the clips' (N, 3) (sample_rate, channels, frames).
        audio: the output settings.
        threads: decode threads.
    """

    def __init__(self, read: Callable[[int], memoryview], meta: np.ndarray, audio: Audio,
                 threads: int) -> None:
        self.read, self.meta, self.audio = read, meta, audio
        self.threads = threads
        self.kind = "audio"
        self.dtype = np.dtype(audio.dtype)
        self.backend = "native" if audio_native.core() is not None else "soundfile"
        self._shapes = ClipShapes(meta, audio)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fastloader-audio")

    def durations(self) -> np.ndarray:
        """Each clip's seconds as read (its crop's, with crop_seconds)."""
        rate, frames = self.meta[:, 0].astype(np.float64), self.meta[:, 2].astype(np.float64)
        seconds = frames / rate
        if self.audio.crop_seconds is not None:
            seconds = np.minimum(seconds, self.audio.crop_seconds)
        return seconds

    def shape(self, indices: np.ndarray) -> tuple[int, ...]:
        return batch_shape(self._shapes, indices, self.audio)

    def trimmed(self, out: np.ndarray, facts: np.ndarray) -> np.ndarray:
        """Without a crop, the batch cut to its longest clip (its bound was a frame long)."""
        longest = int(facts.max(initial=1))
        if self.audio.crop_seconds is None and longest < out.shape[2]:
            return np.ascontiguousarray(out[:, :, :longest])
        return out

    def finish(self, clips: torch.Tensor, facts: torch.Tensor, from_ring: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(waves, lengths), cut on the device when from the ring, log-mel if asked."""
        if from_ring and self.audio.crop_seconds is None:  # a torch reduction costs ~0.1 ms
            longest = int(facts.max()) if facts.numel() else 1
            if longest < clips.shape[2]:
                clips = clips[:, :, :longest].contiguous()
        if self.audio.log_mel is not None:  # on the device, after the copy
            return self.audio.log_mel(clips, facts)
        return clips, facts

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def after_fork(self) -> None:
        """In a forked child: the parent's pool threads are not there; start a new pool."""
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fastloader-audio")

    def clip(self, index: int, seed: int, epoch: int, out: np.ndarray) -> int:
        """Sample index decoded into out [C, T] (the rest zeroed); its length."""
        crop = plan_crop(self.meta, index, self.audio, seed, epoch)
        rate, channels = int(self.meta[index, 0]), int(self.meta[index, 1])
        target = self.audio.sample_rate or rate
        data = self.read(index)
        into_row = rate == target and out.dtype == np.float32 and crop.frames <= out.shape[1]
        if into_row:  # FLAC/WAV at the output rate: decoded natively straight into the row
            got = audio_native.decode_into(data, crop.start, crop.frames,
                                           out[:, :crop.frames], self.audio.mono)
            if got is not None:
                return self._filled(out, got, crop)
        wave = None if into_row else self._native_wave(data, crop, out.shape[0])
        if wave is None:  # left to libsndfile
            copy = 2 * crop.frames >= int(self.meta[index, 2])  # most of it: a memfd (decode)
            if self._direct(rate, channels, out, crop.frames):
                return self._read_into(data, crop, out, copy)
            wave = clips.decode(data, crop.start, crop.frames, copy=copy)
            if wave.shape[0] != crop.frames:
                raise DecodeError(f"decodes to {wave.shape[0]} frames from frame {crop.start}, "
                                  f"its index says {crop.frames}")
            wave = clips.mix(wave, self.audio.mono, self.audio.channels)
        wave = clips.resample(wave, rate, target, self.audio.resample_quality)
        if wave.shape[1] != out.shape[0]:
            raise DecodeError(f"has {wave.shape[1]} channels, its batch {out.shape[0]}")
        length = min(wave.shape[0], out.shape[1])
        if out.dtype == np.int16:  # round(x * 32767), clipped, as int16 PCM is read back
            out[:, :length] = np.clip(np.rint(wave[:length].T * 32767.0), -32768, 32767)
        else:
            out[:, :length] = wave[:length].T
        out[:, length:] = 0
        return length

    def _native_wave(self, data: memoryview, crop: Crop, channels: int) -> np.ndarray | None:
        """The crop decoded natively and mixed to the batch's channels, [frames, channels]
        (soxr's layout), or None when the clip is left to libsndfile."""
        wave = np.empty((crop.frames, channels), np.float32)
        got = audio_native.decode_into(data, crop.start, crop.frames, wave.T, self.audio.mono)
        if got is None:
            return None
        return wave[: self._filled(None, got, crop)]

    @staticmethod
    def _filled(out: np.ndarray | None, got: int, crop: Crop) -> int:
        """got, checked against the crop's frames; out's frames after it zeroed."""
        if got != crop.frames:
            raise DecodeError(f"decodes to {got} frames from frame {crop.start}, its index "
                              f"says {crop.frames}")
        if out is not None:
            out[:, got:] = 0
        return got

    def _direct(self, rate: int, channels: int, out: np.ndarray, frames: int) -> bool:
        """Whether libsndfile can write the clip straight into its batch row: a mono clip
        kept at its rate into a float32 row long enough (out [1, T] is then [T, 1] in
        memory, libsndfile's layout)."""
        return (channels == 1 and out.shape[0] == 1 and out.dtype == np.float32
                and out.flags.c_contiguous
                and rate == (self.audio.sample_rate or rate) and frames <= out.shape[1])

    def _read_into(self, data: memoryview, crop: Crop, out: np.ndarray, copy: bool) -> int:
        row = out.reshape(-1)  # [1, T] -> [T]: a view, the row is C-contiguous
        got = clips.decode(data, crop.start, crop.frames,
                           row[:crop.frames].reshape(crop.frames, 1), copy).shape[0]
        if got != crop.frames:
            raise DecodeError(f"decodes to {got} frames from frame {crop.start}, its index "
                              f"says {crop.frames}")
        row[got:] = 0
        return got

    def decode_into(self, indices: np.ndarray, seed: int, epoch: int, out: np.ndarray
                    ) -> tuple[np.ndarray, list[Failure]]:
        """Every clip of the batch into out [B, C, T]: (lengths int64 [B], failures)."""
        lengths, failures = decode_rows(
            self._pool, self.threads, indices,
            lambda row, sample: self.clip(sample, seed, epoch, out[row]))
        return np.array([n or 0 for n in lengths], np.int64), failures

    def replace(self, failure: Failure, seed: int, epoch: int, out: np.ndarray
                ) -> tuple[int, int]:
        """on_error="skip": the next clip that decodes in the failed one's row; (its index,
        its length)."""
        return replace_failed(failure, len(self.meta),
                              lambda sample: self.clip(sample, seed, epoch, out[failure.row]))
