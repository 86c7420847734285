"""Audio clips made with soundfile for the audio tests: tones with a per-channel pitch and
noise, in WAV, FLAC, MP3 or Ogg Opus/Vorbis, any rate, channels and length; and tiny trees in
the layouts of LibriSpeech, Common Voice and NeMo manifests."""

from __future__ import annotations

import io
from pathlib import Path

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


def encode(wave: np.ndarray, rate: int, container: str = "FLAC", subtype: str = "PCM_16") -> bytes:
    """wave [frames, channels] encoded by libsndfile as container/subtype."""
    import soundfile as sf

    out = io.BytesIO()
    sf.write(out, wave, rate, format=container, subtype=subtype)
    return out.getvalue()


# Stereo pairs that lead libFLAC's encoder to each channel assignment: a clean tone on the side
# it codes directly and noise on the other makes the side channel the cheap one.
STEREO_MODES = {"independent": 1 << 1, "left/side": 1 << 8, "side/right": 1 << 9,
                "mid/side": 1 << 10}


def stereo(mode: str, rate: int = 16000, seconds: float = 2.0) -> np.ndarray:
    """float32 [frames, 2] whose FLAC encoding uses the channel assignment `mode`."""
    t = np.arange(round(rate * seconds)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 220 * t)
    noise = 0.05 * np.random.default_rng(0).standard_normal(len(t))
    pairs = {"independent": (tone, noise), "left/side": (tone, tone + noise),
             "side/right": (tone + noise, tone), "mid/side": (tone + noise, tone - noise / 2)}
    return np.stack(pairs[mode], 1).astype(np.float32)


def id3_tag(body: int = 40) -> bytes:
    """An ID3v2.4 tag of `body` zero bytes (a syncsafe size), as may precede a FLAC stream."""
    size = bytes([(body >> 21) & 0x7F, (body >> 14) & 0x7F, (body >> 7) & 0x7F, body & 0x7F])
    return b"ID3\x04\x00\x00" + size + bytes(body)


# The layouts of speech corpora, made tiny: what LibriSpeech, Common Voice and NeMo users have.
def librispeech(split: Path, speakers: dict[int, list[int]], per_chapter: int = 2
                ) -> dict[str, tuple[str, bytes]]:
    """A LibriSpeech split folder: SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac beside
    SPEAKER-CHAPTER.trans.txt; utterance id -> (its transcript, its clip's bytes)."""
    made = {}
    for speaker, chapters in speakers.items():
        for chapter in chapters:
            folder = split / str(speaker) / str(chapter)
            folder.mkdir(parents=True, exist_ok=True)
            lines = []
            for k in range(per_chapter):
                utterance = f"{speaker}-{chapter}-{k:04d}"
                data = clip(16000, 0.2 + 0.05 * k, 1, "flac", seed=speaker + chapter + k)
                (folder / f"{utterance}.flac").write_bytes(data)
                text = f"WORDS OF {speaker} IN {chapter} NUMBER {k}"
                lines.append(f"{utterance} {text}\n")
                made[utterance] = (text, data)
            (folder / f"{speaker}-{chapter}.trans.txt").write_text("".join(lines))
    return made


def common_voice(language: Path, n: int = 4) -> list[dict[str, str]]:
    """A Common Voice language folder: clips/*.mp3 and train.tsv, dev.tsv (tab-separated, no
    quoting: a sentence may hold a double quote); the train rows written."""
    (language / "clips").mkdir(parents=True, exist_ok=True)
    header = ["client_id", "path", "sentence", "up_votes", "down_votes", "age", "gender"]
    splits = {"train": range(n), "dev": range(n, n + 2)}
    rows: dict[str, list[dict[str, str]]] = {}
    for split, ks in splits.items():
        rows[split] = []
        for k in ks:
            name = f"common_voice_en_{k}.mp3"
            (language / "clips" / name).write_bytes(clip(24000, 0.3, 1, "mp3", seed=k))
            rows[split].append({"client_id": f"c{k:03x}", "path": name,
                                "sentence": f'"Hello," she said {k}.', "up_votes": str(k % 3),
                                "down_votes": "0", "age": "" if k % 2 else "twenties",
                                "gender": ""})
        (language / f"{split}.tsv").write_text("\t".join(header) + "\n" + "".join(
            "\t".join(r[c] for c in header) + "\n" for r in rows[split]))
    return rows["train"]


def nemo_manifest(folder: Path, n: int = 3, name: str = "train_manifest.jsonl"
                  ) -> list[bytes]:
    """A NeMo manifest (audio_filepath, duration, text), its WAV clips under wavs/."""
    import json

    (folder / "wavs").mkdir(parents=True, exist_ok=True)
    written, lines = [], []
    for k in range(n):
        data = clip(16000, 0.25, 1, "wav", seed=k)
        (folder / "wavs" / f"{k}.wav").write_bytes(data)
        written.append(data)
        lines.append(json.dumps({"audio_filepath": f"wavs/{k}.wav", "duration": 0.25,
                                 "text": f"utterance {k}"}) + "\n")
    (folder / name).write_text("".join(lines))
    return written
