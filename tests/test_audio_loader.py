"""The audio loader against soundfile + soxr on the same clips: samples within 1e-5 (the same
libraries, so only float rounding differs), lengths exact, crops at both ends of a clip,
crops drawn from (seed, epoch, sample), damaged clips named or skipped."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fastloader
from audiogen import clip
from fastloader import Audio, FastLoader
from fastloader.errors import DecodeError, InvalidArgumentError
from fastloader.loader.clips.audio_batch import plan_crop
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package

sf = pytest.importorskip("soundfile", reason="soundfile (the audio extra) is a test dependency")
soxr = pytest.importorskip("soxr", reason="soxr (the audio extra) is a test dependency")

TOLERANCE = 1e-5  # float32 rounding of the same decode and resample
CASES = [("wav", 8000, 1, 0.1), ("flac", 16000, 2, 1.3), ("mp3", 22050, 1, 2.0),
         ("opus", 48000, 2, 0.7), ("flac", 44100, 1, 20.0), ("ogg", 32000, 2, 0.4),
         ("wav", 48000, 2, 3.1), ("opus", 8000, 1, 0.25)]
FIELDS = {"audio": "audio", "text": "text"}


def reference(data: bytes, start: int, frames: int, rate: int, mono: bool) -> np.ndarray:
    """What the usual DataLoader worker computes: [C, T] float32."""
    with sf.SoundFile(io.BytesIO(data)) as f:
        f.seek(start)
        wave = f.read(frames, dtype="float32", always_2d=True)
    if mono:
        wave = wave.mean(axis=1, keepdims=True, dtype=np.float32)
    if f.samplerate != rate:
        wave = soxr.resample(wave, f.samplerate, rate, quality="HQ").reshape(-1, wave.shape[1])
    return np.asarray(wave, np.float32).T


@pytest.fixture(scope="module")
def clips_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    root = tmp_path_factory.mktemp("audio") / "clips.lmdb"
    datas = [clip(rate, seconds, ch, fmt, seed=i) for i, (fmt, rate, ch, seconds) in
             enumerate(CASES)]
    pack([{"audio": d, "text": f"clip {i}"} for i, d in enumerate(datas)], root, fields=FIELDS)
    return root, datas


def _batches(root: Path, **kwargs: Any) -> list[Any]:
    with FastLoader(root, device="cpu", fields=["audio", "text"], **kwargs) as loader:
        return list(loader)


@pytest.mark.parametrize("rate", [16000, 44100])
def test_whole_clips_match_soundfile_and_soxr(clips_dataset: Any, rate: int) -> None:
    root, datas = clips_dataset
    batches = _batches(root, batch_size=3, audio=Audio(sample_rate=rate), num_threads=2)
    k = 0
    for (waves, lengths), texts in batches:
        assert waves.dtype == torch.float32 and lengths.dtype == torch.int64
        assert waves.shape[2] == int(lengths.max())  # padded to the batch's longest
        for row in range(waves.shape[0]):
            want = reference(datas[k], 0, sf.info(io.BytesIO(datas[k])).frames, rate, True)
            n = int(lengths[row])
            assert n == want.shape[1], texts[row]  # lengths exact
            got = waves[row].numpy()
            assert np.abs(got[:, :n] - want).max() <= TOLERANCE, texts[row]
            assert not got[:, n:].any()  # zero-padded
            k += 1
    assert k == len(CASES)


def test_stereo_kept_and_mono_repeated(clips_dataset: Any) -> None:
    root, datas = clips_dataset
    batches = _batches(root, batch_size=1, audio=Audio(sample_rate=16000, mono=False,
                                                       channels=2))
    for k, ((waves, lengths), _) in enumerate(batches):
        info = sf.info(io.BytesIO(datas[k]))
        want = reference(datas[k], 0, info.frames, 16000, False)
        if info.channels == 1:
            want = np.repeat(want, 2, axis=0)
        assert waves.shape[1] == 2
        assert np.abs(waves[0].numpy()[:, : int(lengths[0])] - want).max() <= TOLERANCE


def test_clips_of_other_channels_in_one_batch_are_refused(clips_dataset: Any) -> None:
    root, _ = clips_dataset
    with pytest.raises(DecodeError, match="channels"):
        _batches(root, batch_size=2, audio=Audio(mono=False))


def test_crops_reach_both_ends_and_match_the_reference(tmp_path: Path) -> None:
    rate, take = 16000, 8000
    data = clip(rate, (take + 3) / rate, 1, "flac")  # 4 possible starts: 0..3
    short = clip(rate, 0.2, 1, "wav", seed=1)  # shorter than the crop: zero-padded
    pack([{"audio": data, "text": "a"}, {"audio": short, "text": "b"}], tmp_path / "c.lmdb",
         fields=FIELDS)
    audio = Audio(sample_rate=8000, crop_seconds=0.5, random_crop=True)
    starts = set()
    with FastLoader(tmp_path / "c.lmdb", batch_size=2, device="cpu", audio=audio, seed=5,
                    fields=["audio"]) as loader:
        meta = loader.dataset.columns.meta("audio")
        for epoch in range(24):
            loader.set_epoch(epoch)
            ((waves, lengths),) = next(iter(loader))
            assert waves.shape == (2, 1, 4000)  # T fixed by the crop
            start = plan_crop(meta, 0, audio, 5, epoch).start
            starts.add(start)
            want = reference(data, start, take, 8000, True)
            assert int(lengths[0]) == want.shape[1] == 4000
            assert np.abs(waves[0].numpy() - want).max() <= TOLERANCE
            whole = reference(short, 0, 3200, 8000, True)
            assert int(lengths[1]) == 1600
            assert np.abs(waves[1, :, :1600].numpy() - whole).max() <= TOLERANCE
            assert not waves[1, :, 1600:].any()
    assert starts == {0, 1, 2, 3}  # the first and the last frames are reached


def test_random_crops_follow_seed_epoch_and_sample_only(clips_dataset: Any) -> None:
    root, _ = clips_dataset
    audio = Audio(sample_rate=16000, crop_seconds=0.2, random_crop=True)

    def waves(**kwargs: Any) -> np.ndarray:
        out = [w.numpy()[:, 0] for (w, _), _ in _batches(root, audio=audio, **kwargs)]
        return np.concatenate(out)

    first = waves(batch_size=2, num_threads=1, seed=3)
    assert np.array_equal(first, waves(batch_size=4, num_threads=2, seed=3))
    assert not np.array_equal(first, waves(batch_size=2, num_threads=1, seed=4))


def test_centre_crop_without_random_crop(clips_dataset: Any) -> None:
    root, datas = clips_dataset
    audio = Audio(sample_rate=16000, crop_seconds=0.5)
    (waves, lengths), _ = _batches(root, batch_size=len(CASES), audio=audio)[0]
    info = sf.info(io.BytesIO(datas[4]))  # 20 s at 44.1 kHz
    take = round(0.5 * info.samplerate)
    want = reference(datas[4], (info.frames - take) // 2, take, 16000, True)
    assert int(lengths[4]) == want.shape[1] == 8000
    assert np.abs(waves[4].numpy() - want).max() <= TOLERANCE


def _damage(root: Path, data: bytes) -> None:
    """Overwrite a clip's frames in its HDF5 shard (its crc32 left stale)."""
    shard = next(root.glob("*.h5"))
    blob = bytearray(shard.read_bytes())
    at = blob.find(data)
    assert at > 0
    rng = np.random.default_rng(0)
    blob[at + 64: at + len(data)] = rng.integers(0, 256, len(data) - 64, np.uint8).tobytes()
    shard.write_bytes(bytes(blob))


def test_a_damaged_clip_is_named_or_skipped(tmp_path: Path) -> None:
    datas = [clip(16000, 0.5 + i / 10, 1, "flac", seed=i) for i in range(6)]
    root = tmp_path / "d.h5"
    pack([{"audio": d, "text": f"t{i}"} for i, d in enumerate(datas)], root, fields=FIELDS)
    _damage(root, datas[3])
    with pytest.raises(DecodeError, match=r"sample 3 .*on_error='skip'"):
        _batches(root, batch_size=2, audio=Audio())
    with FastLoader(root, batch_size=2, device="cpu", audio=Audio(), on_error="skip",
                    fields=["audio", "text"]) as loader:
        texts = [t for _, batch in loader for t in batch]
        assert loader.stats().skipped == 1
    assert texts == ["t0", "t1", "t2", "t4", "t4", "t5"]  # replaced by the next clip


def test_audio_with_a_label_yields_waves_and_labels(tmp_path: Path) -> None:
    samples = [{"audio": clip(16000, 0.3, 1, "wav", seed=i), "label": i % 2} for i in range(4)]
    pack(samples, tmp_path / "l.lmdb", fields={"audio": "audio", "label": ("int", ["no", "yes"])})
    with FastLoader(tmp_path / "l.lmdb", batch_size=4, device="cpu", audio=Audio()) as loader:
        (waves, lengths), labels = next(iter(loader))
    assert waves.shape == (4, 1, 4800) and lengths.tolist() == [4800] * 4
    assert labels.tolist() == [0, 1, 0, 1]


def test_the_image_loader_points_an_audio_dataset_to_audio(clips_dataset: Any) -> None:
    root, _ = clips_dataset
    with pytest.raises(InvalidArgumentError, match=r"audio=fastloader\.Audio"):
        FastLoader(root, device="cpu")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"sample_rate": 0}, "sample_rate"), ({"crop_seconds": -1.0}, "crop_seconds"),
    ({"random_crop": True}, "needs crop_seconds"), ({"mono": True, "channels": 2}, "mono"),
    ({"resample_quality": "best"}, "resample_quality"), ({"dtype": "float16"}, "dtype")])
def test_bad_audio_settings_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(fastloader.InvalidArgumentError, match=match):
        Audio(**kwargs)


def test_a_forked_child_iterates_its_copy(clips_dataset: Any) -> None:
    root, _ = clips_dataset
    with FastLoader(root, batch_size=3, device="cpu", audio=Audio(), fields=["text"]) as loader:
        want = [t for (texts,) in loader for t in texts]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the parent's decode threads are gone
            code = 1
            try:
                got = [t for (texts,) in loader for t in texts]
                os.write(write, json.dumps(got).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as pipe:
            got = json.loads(pipe.read())
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert got == want


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA device: the pinned ring and the side-stream copy")
def test_cuda_batches_equal_the_cpu_ones(clips_dataset: Any) -> None:
    root, _ = clips_dataset
    audio = Audio(sample_rate=16000, crop_seconds=0.3, random_crop=True)
    cpu = _batches(root, batch_size=3, audio=audio)
    with FastLoader(root, batch_size=3, device="cuda", audio=audio, prefetch=2,
                    fields=["audio", "text"]) as loader:
        for _ in range(2):  # the second pass reuses the ring's slots
            cuda = list(loader)
            loader.set_epoch(0)
        assert loader.stats().pinned
    for ((w, n), t), ((wc, nc), tc) in zip(cpu, cuda, strict=True):
        assert wc.is_cuda and t == tc
        assert torch.equal(n, nc.cpu()) and torch.allclose(w, wc.cpu(), atol=TOLERANCE)


def test_int16_output_is_the_float_output_rounded(clips_dataset: Any) -> None:
    root, _ = clips_dataset
    floats = _batches(root, batch_size=4, audio=Audio(sample_rate=16000))
    ints = _batches(root, batch_size=4, audio=Audio(sample_rate=16000, dtype="int16"))
    for ((w, n), _), ((wi, ni), _) in zip(floats, ints, strict=True):
        assert wi.dtype == torch.int16 and torch.equal(n, ni)
        want = np.clip(np.rint(w.numpy() * 32767.0), -32768, 32767)
        assert np.array_equal(wi.numpy(), want)
