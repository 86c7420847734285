"""Audio clips made with soundfile for the audio tests: tones with a per-channel pitch and
noise, in WAV, FLAC, MP3 or Ogg Opus/Vorbis, any rate, channels and length."""

from __future__ import annotations

import io

import numpy as np

FORMATS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"),
           "mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "ogg": ("OGG", "VORBIS")}


def signal(rate: int, seconds: float, channels: int, seed: int = 0) -> np.ndarray:
    """float32 [frames, channels]: a tone per channel plus a little noise, within +-0.5."""
    frames = max(1, round(rate * seconds))
    t = np.arange(frames) / rate
    rng = np.random.default_rng(seed)
    tones = [0.3 * np.sin(2 * np.pi * (180 + 90 * c + 17 * seed) * t) for c in range(channels)]
    return (np.stack(tones, 1) + 0.02 * rng.standard_normal((frames, channels))).astype(
        np.float32)


def clip(rate: int, seconds: float, channels: int = 1, fmt: str = "flac", seed: int = 0) -> bytes:
    """An encoded clip of signal(rate, seconds, channels, seed)."""
    import soundfile as sf

    container, subtype = FORMATS[fmt]
    out = io.BytesIO()
    sf.write(out, signal(rate, seconds, channels, seed), rate, format=container, subtype=subtype)
    return out.getvalue()
