"""fastloader.LogMel: batched log-mel spectrograms of zero-padded clips equal a numpy reference
computed clip by clip (its own samples only), frames after each clip's end masked; and the
audio loader hands them over with Audio(log_mel=)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from audiogen import clip, signal
from fastloader import Audio, FastLoader, LogMel
from fastloader.errors import FastloaderError
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package

TOLERANCE = 2e-3  # float32 STFT against float64 numpy, on log values (natural log)


def reference(wave: np.ndarray, rate: int, n_fft: int, hop: int, win: int, n_mels: int,
              f_max: float | None = None, offset: float = 1e-6) -> np.ndarray:
    """(n_mels, 1 + len // hop) log-mel of one mono clip: zero-padded by n_fft // 2 each side,
    a periodic Hann window of `win` centred in n_fft, rfft power, HTK triangular filters."""
    x = np.pad(np.asarray(wave, np.float64), n_fft // 2)
    window = np.zeros(n_fft)
    left = (n_fft - win) // 2
    window[left:left + win] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)
    count = 1 + len(wave) // hop
    frames = np.stack([x[t * hop:t * hop + n_fft] * window for t in range(count)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # (count, bins)
    top = rate / 2 if f_max is None else f_max
    mel = np.linspace(0.0, 2595 * np.log10(1 + top / 700), n_mels + 2)
    hz = 700 * (10 ** (mel / 2595) - 1)
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    filters = np.zeros((n_mels, len(freqs)))
    for m in range(n_mels):
        lo, mid, hi = hz[m], hz[m + 1], hz[m + 2]
        filters[m] = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
    return np.log(filters @ power.T + offset)


@pytest.mark.parametrize(("n_fft", "hop", "win", "n_mels"), [(400, 160, 400, 80),
                                                             (512, 128, 320, 40)])
def test_batched_log_mel_equals_the_per_clip_reference(n_fft: int, hop: int, win: int,
                                                       n_mels: int) -> None:
    rate = 16000
    clips = [signal(rate, seconds, 1, seed=i)[:, 0] for i, seconds in
             enumerate([0.05, 1.0, 0.37, 0.6])]
    lengths = torch.tensor([len(c) for c in clips])
    waves = torch.zeros(len(clips), 1, int(lengths.max()))
    for row, c in enumerate(clips):
        waves[row, 0, :len(c)] = torch.from_numpy(c)
    mel = LogMel(rate, n_fft=n_fft, hop_length=hop, win_length=win, n_mels=n_mels, pad_value=-7)
    features, frames = mel(waves, lengths)
    assert features.shape == (4, 1, n_mels, 1 + waves.shape[2] // hop)
    assert frames.tolist() == [1 + len(c) // hop for c in clips]
    for row, c in enumerate(clips):
        want = reference(c, rate, n_fft, hop, win, n_mels)
        got = features[row, 0].numpy()
        np.testing.assert_allclose(got[:, :frames[row]], want, rtol=0, atol=TOLERANCE)
        assert (got[:, frames[row]:] == -7).all()


def test_stereo_and_int16_waves() -> None:
    rate = 8000
    wave = signal(rate, 0.5, 2, seed=3)
    waves = torch.from_numpy(wave.T.copy())[None]
    mel = LogMel(rate, n_fft=256, hop_length=80, n_mels=20, f_max=3000)
    features, _ = mel(waves, torch.tensor([wave.shape[0]]))
    for channel in range(2):
        want = reference(wave[:, channel], rate, 256, 80, 256, 20, f_max=3000)
        np.testing.assert_allclose(features[0, channel].numpy(), want, rtol=0, atol=TOLERANCE)
    pcm = torch.from_numpy(np.rint(wave.T * 32767).astype(np.int16))[None]
    from_pcm, _ = mel(pcm, torch.tensor([wave.shape[0]]))
    np.testing.assert_allclose(from_pcm.numpy(), features.numpy(), rtol=0, atol=1e-2)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"win_length": 800}, "longer than n_fft"), ({"f_max": 9000}, "f_max"),
    ({"log_offset": 0}, "log_offset"), ({"n_mels": 0}, "n_mels")])
def test_bad_log_mel_settings_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(FastloaderError, match=match):
        LogMel(16000, **kwargs)


def test_the_loader_hands_over_log_mels(tmp_path: Path) -> None:
    datas = [clip(16000, s, 1, "flac", seed=i) for i, s in enumerate([0.3, 1.1, 0.7])]
    root = tmp_path / "clips.lmdb"
    pack([{"audio": d} for d in datas], root, fields={"audio": "audio"})
    mel = LogMel(16000, n_mels=64)
    with FastLoader(root, batch_size=3, device="cpu", audio=Audio(log_mel=mel)) as loader:
        (features, frames), = (batch["audio"] for batch in loader)
    with FastLoader(root, batch_size=3, device="cpu", audio=Audio()) as loader:
        (waves, lengths), = (batch["audio"] for batch in loader)
    want, want_frames = mel(waves, lengths)
    assert features.shape == (3, 1, 64, want.shape[-1])
    assert torch.equal(frames, want_frames) and torch.equal(features, want)
    assert frames.tolist() == [1 + int(n) // mel.hop_length for n in lengths]
    with pytest.raises(FastloaderError, match="8000 Hz"):
        Audio(sample_rate=16000, log_mel=LogMel(8000))


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA device: LogMel on the loader's device")
def test_log_mels_on_cuda_equal_the_cpu_ones(tmp_path: Path) -> None:
    datas = [clip(16000, s, 1, "flac", seed=i) for i, s in enumerate([0.3, 1.1, 0.7])]
    root = tmp_path / "clips.lmdb"
    pack([{"audio": d} for d in datas], root, fields={"audio": "audio"})
    audio = Audio(log_mel=LogMel(16000, n_mels=64))
    batches = {}
    for device in ("cpu", "cuda"):
        with FastLoader(root, batch_size=3, device=device, audio=audio) as loader:
            batches[device] = next(iter(loader))["audio"]
    (cpu, frames), (cuda, frames_cuda) = batches["cpu"], batches["cuda"]
    assert cuda.is_cuda and torch.equal(frames, frames_cuda.cpu())
    torch.testing.assert_close(cuda.cpu(), cpu, rtol=0, atol=1e-3)
