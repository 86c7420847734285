"""Audio loading: FastLoader(audio=) vs the plain torch DataLoader written the usual way (workers
that open each clip file with soundfile, seek to the crop, read it, mix to mono, resample with
soxr, and a collate that zero-pads), same clips, same crops (the loader's own crop plan), same
batch; interleaved rounds, medians and same-round ratios. `--decode` times the per-clip decode
alone (the extension's FLAC/WAV decoder against soundfile, one core). `--gil` measures whether
soundfile's decode and soxr's resample release the GIL (a Python thread spinning beside one
long call keeps its rate only if they do)."""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr
import torch

from fastloader import Audio, FastLoader, pack
from fastloader.loader.clips.audio_batch import plan_crop
from harness import gil_kept

RATES = (16000, 44100, 22050, 48000)  # three of four clips are resampled to 16 kHz


def make_clips(folder: Path, count: int, seconds: tuple[float, float], fmt: str = "flac",
               rates: tuple[int, ...] = RATES) -> list[Path]:
    """Clips of speech-like length: noise shaped by a slow envelope, rates as given in turn."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        rate = rates[i % len(rates)]
        frames = int(rng.uniform(*seconds) * rate)
        envelope = 0.5 + 0.5 * np.sin(np.arange(frames) / rate * 3.0)
        wave = (0.2 * rng.standard_normal(frames) * envelope).astype(np.float32)
        path = folder / f"{i:05d}.{fmt}"
        sf.write(path, wave, rate)
        paths.append(path)
    return paths


class ClipFiles(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The usual Dataset: one clip file per item, decoded in the worker."""

    def __init__(self, paths: list[Path], meta: np.ndarray, audio: Audio, seed: int) -> None:
        self.paths, self.meta, self.audio, self.seed = paths, meta, audio, seed

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        crop = plan_crop(self.meta, i, self.audio, self.seed, 0)
        with sf.SoundFile(self.paths[i]) as f:
            f.seek(crop.start)
            wave = f.read(crop.frames, dtype="float32", always_2d=True).mean(1)
            rate = f.samplerate
        if rate != self.audio.sample_rate:
            wave = soxr.resample(wave, rate, self.audio.sample_rate)
        return torch.from_numpy(np.ascontiguousarray(wave, np.float32))


def pad_collate(waves: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(w) for w in waves], dtype=torch.int64)
    out = torch.zeros(len(waves), 1, int(lengths.max()))
    for row, wave in enumerate(waves):
        out[row, 0, : len(wave)] = wave
    return out, lengths


def lhotse_loader(paths: list[Path], meta: np.ndarray, audio: Audio, batch: int, workers: int
                  ) -> Any:
    """Lhotse's usual pipeline over the same clips, crops (the loader's crop plan, as seconds)
    and batches: UnsupervisedWaveformDataset in a DataLoader driven by a SimpleCutSampler."""
    from lhotse import CutSet, Recording
    from lhotse.dataset import SimpleCutSampler, UnsupervisedWaveformDataset

    cuts = []
    for i, path in enumerate(paths):
        crop, rate = plan_crop(meta, i, audio, 0, 0), int(meta[i, 0])
        cut = Recording.from_file(path).to_cut().truncate(
            offset=crop.start / rate, duration=crop.frames / rate, preserve_id=True)
        cuts.append(cut.resample(audio.sample_rate) if rate != audio.sample_rate else cut)
    sampler = SimpleCutSampler(CutSet.from_cuts(cuts), max_cuts=batch, shuffle=False)
    return torch.utils.data.DataLoader(UnsupervisedWaveformDataset(), sampler=sampler,
                                       batch_size=None, num_workers=workers,
                                       persistent_workers=True, prefetch_factor=4)


def lhotse_missing(rates: tuple[int, ...], target: int | None) -> str | None:
    """Why Lhotse's leg cannot run here, or None: lhotse itself, or (clips to resample) the
    scipy its resampler needs without torchaudio."""
    try:
        import lhotse  # noqa: F401
        if any(rate != target for rate in rates):
            import scipy  # noqa: F401
    except ImportError as exc:
        return f"{exc}"
    return None


def timed(batches: Any) -> tuple[int, float]:
    start, clips = time.perf_counter(), 0
    for batch in batches:
        waves = batch[0][0] if isinstance(batch[0], tuple) else batch[0]
        clips += waves.shape[0]
    return clips, time.perf_counter() - start


def gil_probe() -> None:
    rate = 16000
    wave = (0.3 * np.random.default_rng(0).standard_normal(rate * 600)).astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, wave, rate, format="FLAC")
    data, blob = buffer.getvalue(), b"\x00" * (1 << 30)
    calls = {"soundfile.read (10 min FLAC)": lambda: sf.read(io.BytesIO(data), dtype="float32"),
             "soxr.resample (10 min, 16k->8k)": lambda: soxr.resample(wave, rate, 8000),
             # the control: bytes.find is one C call that keeps the GIL
             "control: bytes.find over 1 GiB": lambda: blob.find(b"\x01")}
    from fastloader.decode import audio_native

    if audio_native.core() is not None:
        row = np.empty((1, len(wave)), np.float32)
        calls["native FLAC decode (10 min)"] = lambda: audio_native.decode_into(
            data, 0, len(wave), row, True)
    for name, call in calls.items():
        ratio = gil_kept(call)
        print(f"{name}: a Python thread beside it ran at {ratio:.2f}x its solo rate "
              "(near 0 if the call holds the GIL)")


def _decode_legs(datas: list[bytes], crops: list[Any], rate: int) -> tuple[Any, Any]:
    """The two per-clip decodes of decode_probe: into one mono row, and soundfile's."""
    from fastloader.decode import audio_native

    row = np.empty((1, 2 * rate), np.float32)

    def native() -> None:
        for data, crop in zip(datas, crops, strict=True):
            audio_native.decode_into(data, crop.start, crop.frames, row, True)

    def soundfile() -> None:
        for data, crop in zip(datas, crops, strict=True):
            with sf.SoundFile(io.BytesIO(data)) as f:
                f.seek(crop.start)
                f.read(crop.frames, dtype="float32", always_2d=True)

    return native, soundfile


def decode_probe(count: int, rounds: int) -> None:
    """Per-clip decode of 2 s crops (random, the loader's plan) of 1-12 s clips on one core:
    the extension's FLAC/WAV decoder into a row against soundfile's open, seek and read."""
    audio = Audio(sample_rate=None, crop_seconds=2.0, random_crop=True)
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, rate in (("flac", 16000), ("flac", 44100), ("wav", 16000), ("wav", 44100)):
            paths = make_clips(Path(tmp) / f"{fmt}{rate}", count, (1.0, 12.0), fmt, (rate,))
            datas = [p.read_bytes() for p in paths]
            meta = np.array([[rate, 1, sf.info(p).frames] for p in paths], np.int64)
            crops = [plan_crop(meta, i, audio, 0, 0) for i in range(count)]
            native, soundfile = _decode_legs(datas, crops, rate)
            times: dict[str, list[float]] = {"native": [], "soundfile": []}
            for round_index in range(rounds):
                legs = [("native", native), ("soundfile", soundfile)]
                for name, leg in legs if round_index % 2 == 0 else legs[::-1]:
                    start = time.perf_counter()
                    leg()
                    times[name].append((time.perf_counter() - start) / count * 1e3)
            ratios = [b / a for a, b in zip(times["native"], times["soundfile"], strict=True)]
            print(f"{fmt} {rate} Hz, 2 s crops of 1-12 s: native "
                  f"{statistics.median(times['native']):.3f} ms/clip, soundfile "
                  f"{statistics.median(times['soundfile']):.3f} ms/clip, same-round ratio "
                  f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clips", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--crop", type=float, default=2.0, help="seconds; 0: whole clips")
    parser.add_argument("--seconds", type=float, nargs=2, default=(1.0, 12.0))
    parser.add_argument("--format", default="flac", choices=("flac", "wav"))
    parser.add_argument("--rates", type=int, nargs="+", default=list(RATES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--gil", action="store_true", help="only the GIL probe")
    parser.add_argument("--no-lhotse", action="store_true", help="leave Lhotse's loader out")
    parser.add_argument("--decode", action="store_true",
                        help="only the per-clip decode: native against soundfile, one core")
    args = parser.parse_args()
    if args.gil:
        gil_probe()
        return 0
    if args.decode:
        decode_probe(args.clips, args.rounds)
        return 0
    audio = (Audio(sample_rate=16000, crop_seconds=args.crop, random_crop=True) if args.crop
             else Audio(sample_rate=16000))
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_clips(Path(tmp) / "clips", args.clips, tuple(args.seconds), args.format,
                           tuple(args.rates))
        root = Path(tmp) / "clips.lmdb"
        pack([{"audio": str(p)} for p in paths], root, fields={"audio": "audio"})
        loader = FastLoader(root, batch_size=args.batch, device="cpu", audio=audio,
                            fields=["audio"], num_threads=args.workers, prefetch=4)
        meta = loader.dataset.columns.meta("audio")
        dataset = ClipFiles(paths, meta, audio, seed=0)
        dl = torch.utils.data.DataLoader(dataset, batch_size=args.batch,
                                         num_workers=args.workers, collate_fn=pad_collate,
                                         persistent_workers=True, prefetch_factor=4)
        legs: dict[str, Any] = {"fastloader": loader, "DataLoader": dl}
        missing = lhotse_missing(tuple(args.rates), audio.sample_rate)
        if missing is not None and not args.no_lhotse:
            print(f"Lhotse's loader left out: {missing}")
        if not args.no_lhotse and missing is None:
            legs["Lhotse"] = lhotse_loader(paths, meta, audio, args.batch, args.workers)
        results: dict[str, list[float]] = {name: [] for name in legs}
        for name in legs:  # warm-up passes: threads, workers and the page cache
            timed(_batches(name, legs[name]))
        for round_index in range(args.rounds):
            order = list(results) if round_index % 2 == 0 else list(results)[::-1]
            for name in order:
                if name == "fastloader":
                    loader.set_epoch(0)
                clips, seconds = timed(_batches(name, legs[name]))
                results[name].append(clips / seconds)
                print(f"round {round_index} {name}: {clips / seconds:.0f} clips/s", flush=True)
        loader.close()
    for name, values in results.items():
        print(f"{name}: median {statistics.median(values):.0f} clips/s over {args.rounds} rounds")
    for other in list(results)[1:]:
        ratios = [a / b for a, b in zip(results["fastloader"], results[other], strict=True)]
        print(f"same-round ratio fastloader/{other}: median {statistics.median(ratios):.2f}x "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


def _batches(name: str, leg: Any) -> Any:
    if name == "Lhotse":
        return ((batch["audio"],) for batch in leg)
    return leg if name == "fastloader" else ((batch,) for batch in leg)


if __name__ == "__main__":
    sys.exit(main())
