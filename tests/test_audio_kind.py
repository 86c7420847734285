"""The audio kind: clips stored as given with (sample_rate, channels, frames) in the index,
refused by name when they do not decode (or skipped), decoded again by verify --decode."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

from audiogen import clip
from fastloader import open_dataset
from fastloader.errors import PackError
from fastloader.format import kinds
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package
from fastloader.pack.maintain.verify import verify

sf = pytest.importorskip("soundfile", reason="soundfile (the audio extra) is a test dependency")

FIELDS = {"audio": "audio", "text": "text"}
CASES = [("wav", 8000, 1, 0.1), ("flac", 16000, 2, 1.3), ("mp3", 22050, 1, 2.0),
         ("opus", 48000, 2, 0.7), ("flac", 44100, 1, 20.0), ("ogg", 32000, 2, 0.4)]


def _samples() -> list[dict[str, object]]:
    return [{"audio": clip(rate, seconds, ch, fmt, seed=i), "text": f"{fmt} {i}"}
            for i, (fmt, rate, ch, seconds) in enumerate(CASES)]


def test_clips_are_stored_as_given_with_their_facts_in_the_index(tmp_path: Path) -> None:
    samples = _samples()
    pack(samples, tmp_path / "a.lmdb", fields=FIELDS)
    with open_dataset(tmp_path / "a.lmdb") as ds:
        assert ds.image_field == "audio"
        meta = ds.columns.meta("audio")
        for i, sample in enumerate(samples):
            data = ds.sample(i)["audio"]
            assert data == sample["audio"]  # never re-encoded
            info = sf.info(io.BytesIO(data))
            assert meta[i].tolist() == [info.samplerate, info.channels, info.frames]
            assert ds.shapes[i].tolist() == [info.channels, info.frames]
            assert ds.sample(i)["text"] == sample["text"]
    assert verify(tmp_path / "a.lmdb", decode=True).problems == []


def test_a_clip_path_is_read(tmp_path: Path) -> None:
    path = tmp_path / "a.wav"
    path.write_bytes(clip(16000, 0.5))
    pack([{"audio": str(path), "text": "x"}], tmp_path / "p.h5", fields=FIELDS)
    with open_dataset(tmp_path / "p.h5") as ds:
        assert ds.sample(0)["audio"] == path.read_bytes()
        assert ds.columns.meta("audio")[0].tolist() == [16000, 1, 8000]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_bad_clip_is_refused_by_name_or_skipped(tmp_path: Path, damage: str) -> None:
    samples = _samples()
    good = samples[2]["audio"]
    assert isinstance(good, bytes)
    samples[2]["audio"] = b"not audio at all" if damage == "garbage" else good[: len(good) // 2]
    with pytest.raises(PackError, match=r"sample 2: field 'audio'"):
        pack(samples, tmp_path / "a.lmdb", fields=FIELDS)
    pack(samples, tmp_path / "b.lmdb", fields=FIELDS, skip_bad=True)
    skipped = json.loads((tmp_path / "b.lmdb" / "skipped.json").read_text())
    assert [s["sample"] for s in skipped] == ["sample 2"]
    with open_dataset(tmp_path / "b.lmdb") as ds:
        assert len(ds) == len(samples) - 1


def test_verify_decode_decodes_each_clip() -> None:
    kind, spec = kinds.AUDIO, None
    good = clip(16000, 1.0, 1, "flac")
    assert kind.verify(spec, good, (1, 16000), None) is None
    assert kind.verify(spec, good, (1, 16000), lambda _: None) is None
    problem = kind.verify(spec, good[: len(good) // 3], (1, 16000), lambda _: None)
    assert problem is not None and "decode" in problem
    # without decode, verify does not open the clip
    assert kind.verify(spec, b"junk", (1, 1), None) is None


def test_the_meta_column_is_range_checked_at_open(tmp_path: Path) -> None:
    pack(_samples()[:2], tmp_path / "a.lmdb", fields=FIELDS)
    from fastloader.errors import DatasetError
    from fastloader.format import index as index_mod
    from fastloader.format.dataset import PackedDataset
    from fastloader.format.manifest import read_manifest

    manifest = read_manifest(tmp_path / "a.lmdb")
    meta = index_mod.load_field(tmp_path / "a.lmdb", manifest, "field.audio.meta", mmap=False)
    assert meta.shape == (2, 3) and np.all(meta >= 1)
    assert kinds.AUDIO.check_column(None, {"meta": np.array([[16000, 0, 5]])}) is not None
    bad = meta.copy()
    bad[1, 2] = 0  # a clip of 0 frames
    np.save(tmp_path / "a.lmdb" / "index" / "field.audio.meta.npy", bad)
    with pytest.raises(DatasetError, match="meta"):
        PackedDataset(tmp_path / "a.lmdb", check_sha256=False)


def test_an_audio_column_beside_images(tmp_path: Path) -> None:
    from imagegen import encode, photo_like

    datas = [clip(16000, 0.2 + i / 10, 1 + i % 2, "wav", seed=i) for i in range(3)]
    images = [encode(photo_like(32, 48, i), "JPEG") for i in range(3)]
    pack([{"image": im, "audio": d} for im, d in zip(images, datas, strict=True)],
         tmp_path / "v.lmdb", fields={"image": "image", "audio": "audio"})
    with open_dataset(tmp_path / "v.lmdb") as ds:
        assert ds.image_field == "image"  # images stay the records
        assert [ds.sample(i)["audio"] for i in range(3)] == datas
        assert ds.columns.meta("audio")[:, 1].tolist() == [1, 2, 1]
    assert verify(tmp_path / "v.lmdb", decode=True).problems == []


@pytest.mark.parametrize("fmt", ["mp3", "wav", "ogg"])
def test_a_thread_decodes_a_cut_clip_after_a_long_one_as_it_is(fmt: str) -> None:
    """decode() copies each clip into its thread's memory file: a damaged (cut) clip after a
    longer one in the same thread decodes as libsndfile reads its bytes alone, never reading
    on into what the longer one left there."""
    from fastloader.decode import audio as clips

    long, short = clip(16000, 3.0, 1, fmt, seed=1), clip(16000, 0.4, 1, fmt, seed=2)
    cut = short[: len(short) * 2 // 3]
    alone = sf.read(io.BytesIO(cut), dtype="float32", always_2d=True)[0]
    clips.decode(long, 0, 48000)
    after = clips.decode(cut, 0, 48000)
    assert after.shape == alone.shape
    np.testing.assert_allclose(after, alone, rtol=0, atol=1e-6)  # mpg123: 1 ulp apart


def test_packdata_info_describes_clips_not_image_sizes(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    from fastloader.pack.cli.main import main

    samples = _samples()
    pack(samples, tmp_path / "a.lmdb", fields=FIELDS)
    infos = [sf.info(io.BytesIO(s["audio"])) for s in samples]  # type: ignore[arg-type]
    assert main(["info", str(tmp_path / "a.lmdb"), "--json"]) == 0
    clips = json.loads(capsys.readouterr().out)["audio"]
    seconds = [i.frames / i.samplerate for i in infos]
    assert clips["clips"] == len(samples)
    assert clips["hours"] == pytest.approx(sum(seconds) / 3600, abs=1e-4)
    assert clips["seconds"]["max"] == pytest.approx(max(seconds), abs=1e-3)
    assert clips["seconds"]["min"] == pytest.approx(min(seconds), abs=1e-3)
    assert clips["sample_rates"] == {str(r): sum(i.samplerate == r for i in infos)
                                     for r in sorted({i.samplerate for i in infos})}
    assert clips["channels"] == {"1": 3, "2": 3}
    assert main(["info", str(tmp_path / "a.lmdb")]) == 0
    text = capsys.readouterr().out
    assert f"audio     6 clips, {sum(seconds) / 3600:.2f} hours" in text
    assert "rates     8000 Hz 1, 16000 Hz 1, 22050 Hz 1" in text and "height" not in text


@pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "memfd_create"),
                    reason="memory files and fork are Linux's")
def test_a_forked_child_decodes_through_its_own_memory_file() -> None:
    """The memfd a thread decodes through is shared with a forked child (and its offset): the
    child makes its own, so a parent and a child decoding at once never share one (an MP3:
    libsndfile decodes it, not the native FLAC/WAV decoders)."""
    from fastloader.decode import audio as clips

    data = clip(16000, 0.5, 1, "mp3", seed=4)
    want = clips.decode(data, 0, 8000)
    parent = os.fstat(clips._threads.memory.fd).st_ino
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if it decoded through a new file
        ok = False
        try:
            ok = np.array_equal(clips.decode(data, 0, 8000), want) and \
                os.fstat(clips._threads.memory.fd).st_ino != parent
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.fstat(clips._threads.memory.fd).st_ino == parent
