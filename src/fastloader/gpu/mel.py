"""LogMel: a batch of waveforms [B, C, T] with their lengths as log-mel spectrograms, on the
batch's device (one torch.stft and one matmul for the whole batch; no torchaudio).

The STFT is centred with zero padding (not reflection), so frame t of a clip sees the clip's
samples and zeros only: the batched spectrogram of a zero-padded clip equals the clip's own for
each of its 1 + length // hop frames, and the frames after those are set to `pad_value`.
"""

from __future__ import annotations

import math

import torch

from fastloader.checks import positive_int
from fastloader.errors import invalid_argument, invalid_type


def hz_to_mel(hz: float) -> float:
    """The HTK mel scale: 2595 log10(1 + hz / 700)."""
    return 2595.0 * math.log10(1.0 + hz / 700.0)


def mel_filters(sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float
                ) -> torch.Tensor:
    """float64 (n_fft // 2 + 1, n_mels) triangular filters, centres equally spaced in HTK mel
    from f_min to f_max, each peaking at 1 (torchaudio's melscale_fbanks, norm=None)."""
    freqs = torch.linspace(0.0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)
    mels = torch.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2, dtype=torch.float64)
    points = 700.0 * (torch.pow(10.0, mels / 2595.0) - 1.0)
    widths = points[1:] - points[:-1]
    slopes = points[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    return torch.clamp(torch.minimum(down, up), min=0.0)


class LogMel:
    """log(mel power + log_offset) of each clip: waves [B, C, T] -> [B, C, n_mels, frames].

    Called as ``features, frame_lengths = LogMel(...)(waves, lengths)`` (the pair the audio
    loader gives), or given to the loader as ``fastloader.Audio(log_mel=LogMel(...))``, which
    then hands over features instead of waveforms, computed on its device after the copy.

    Args:
        sample_rate: the waveforms' rate in Hz (the loader's Audio(sample_rate=) must match).
        n_fft: the FFT size (n_fft // 2 + 1 bins).
        hop_length: samples between frames (default n_fft // 4).
        win_length: the Hann window's length, centred in n_fft (default n_fft).
        n_mels: mel filters.
        f_min, f_max: the filters' span in Hz (f_max default sample_rate / 2).
        log_offset: added to the mel power before the log (no log of 0).
        pad_value: the value of the frames after each clip's last.

    Raises:
        InvalidArgumentError: a value is out of range.
    """

    def __init__(self, sample_rate: int = 16000, n_fft: int = 400, hop_length: int | None = None,
                 win_length: int | None = None, n_mels: int = 80, f_min: float = 0.0,
                 f_max: float | None = None, log_offset: float = 1e-6,
                 pad_value: float = 0.0) -> None:
        self.sample_rate = positive_int("LogMel(sample_rate)", sample_rate)
        self.n_fft = positive_int("LogMel(n_fft)", n_fft)
        self.hop_length = positive_int("LogMel(hop_length)", hop_length or max(1, n_fft // 4))
        self.win_length = positive_int("LogMel(win_length)", win_length or n_fft)
        self.n_mels = positive_int("LogMel(n_mels)", n_mels)
        if self.win_length > self.n_fft:
            raise invalid_argument("LogMel(win_length)", win_length, f"is longer than n_fft "
                                   f"({n_fft})", "Pass win_length <= n_fft.")
        top = sample_rate / 2 if f_max is None else float(f_max)
        if not 0.0 <= f_min < top <= sample_rate / 2:
            raise invalid_argument("LogMel(f_min, f_max)", (f_min, f_max), "must satisfy 0 <= "
                                   f"f_min < f_max <= sample_rate / 2 ({sample_rate / 2})",
                                   "Pass f_max=None for the Nyquist frequency.")
        if not log_offset > 0:
            raise invalid_argument("LogMel(log_offset)", log_offset, "must be > 0",
                                   "Pass e.g. log_offset=1e-6.")
        self.f_min, self.f_max = float(f_min), top
        self.log_offset, self.pad_value = float(log_offset), float(pad_value)
        self._filters = mel_filters(self.sample_rate, self.n_fft, self.n_mels, self.f_min, top)
        self._window = torch.hann_window(self.win_length, dtype=torch.float64)
        # (device, dtype) -> (window, filters) there: copied once, not on every batch
        self._moved: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_moved": {}}  # device copies stay in their process

    def _on(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The window and the filterbank on `device` as `dtype`."""
        moved = self._moved.get((device, dtype))
        if moved is None:
            moved = self._window.to(device, dtype), self._filters.to(device, dtype).T
            self._moved[(device, dtype)] = moved
        return moved

    def frames(self, lengths: torch.Tensor) -> torch.Tensor:
        """Each clip's real frames: 1 + length // hop_length (int64)."""
        return 1 + torch.div(lengths.to(torch.int64), self.hop_length, rounding_mode="floor")

    def __call__(self, waves: torch.Tensor, lengths: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(waves, torch.Tensor) or waves.ndim != 3:
            raise invalid_type("waves", waves, "a [B, C, T] tensor")
        work = waves.float() / 32767.0 if not waves.is_floating_point() else waves
        batch, channels, length = work.shape
        dtype = torch.float64 if work.dtype == torch.float64 else torch.float32
        work = work.to(dtype)
        window, filters = self._on(work.device, dtype)
        spec = torch.stft(work.reshape(batch * channels, length), self.n_fft, self.hop_length,
                          self.win_length, window, center=True,
                          pad_mode="constant", return_complex=True)
        power = spec.real.square() + spec.imag.square()  # [B*C, bins, frames]
        mel = torch.matmul(filters, power)
        logs = torch.log(mel + self.log_offset).reshape(batch, channels, self.n_mels, -1)
        frames = self.frames(lengths.to(work.device))
        keep = torch.arange(logs.shape[-1], device=work.device)[None, :] < frames[:, None]
        return logs.masked_fill(~keep[:, None, None, :], self.pad_value), frames

    def __repr__(self) -> str:
        return (f"LogMel(sample_rate={self.sample_rate}, n_fft={self.n_fft}, hop_length="
                f"{self.hop_length}, win_length={self.win_length}, n_mels={self.n_mels}, "
                f"f_min={self.f_min}, f_max={self.f_max})")
