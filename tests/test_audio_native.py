"""The extension's FLAC and WAV decoders against soundfile on clips soundfile wrote: float32
bit for bit (8/16/24-bit FLAC, every stereo mode, WAV PCM and float), crops at both ends, inside
one FLAC frame and across frames; the seek decodes only the frames a crop covers; other clips
are left to soundfile by the explicit rule; damaged bytes are refused by name."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from audiogen import STEREO_MODES, clip, encode, id3_tag, signal, stereo
from fastloader.decode import audio as clips
from fastloader.decode import audio_native
from fastloader.errors import DecodeError

sf = pytest.importorskip("soundfile", reason="soundfile (the audio extra) is a test dependency")
pytestmark = [pytest.mark.native, pytest.mark.wheel]

BLOCK = 4096  # libsndfile's FLAC encoder's block size


def reference(data: bytes, start: int, frames: int) -> np.ndarray:
    """soundfile's float32 [frames, channels] from `start`."""
    with sf.SoundFile(io.BytesIO(data)) as f:
        f.seek(start)
        return f.read(frames, dtype="float32", always_2d=True)


def native(data: bytes, start: int, frames: int, channels: int, mono: bool = False
           ) -> tuple[np.ndarray, int, int]:
    """The extension's decode of the crop: ([frames, C] float32, FLAC frames decoded, modes)."""
    core = audio_native.core()
    assert core is not None
    out = np.full((1 if mono else channels, frames), np.nan, np.float32)
    status, got, blocks, modes, why = core.audio_decode(data, start, frames, out, mono)
    assert status == audio_native.DECODED, why
    return out[:, :got].T, blocks, modes


def crops(frames: int) -> list[tuple[int, int]]:
    """Whole, both ends, inside one frame, across frames, one frame's last sample."""
    cases = [(0, frames), (0, min(frames, 7)), (max(0, frames - 9), min(9, frames)),
             (frames // 3, frames // 4), (min(frames - 1, BLOCK - 1), 2),
             (min(frames - 1, BLOCK + 100), 50)]
    return [(s, n) for s, n in cases if n > 0 and s < frames]


def assert_same(data: bytes, frames: int, channels: int) -> None:
    for start, n in crops(frames):
        want = reference(data, start, n)
        got, _, _ = native(data, start, n, channels)
        assert got.dtype == np.float32 and np.array_equal(got, want), (start, n)
        mono, _, _ = native(data, start, n, channels, mono=True)
        assert np.array_equal(mono, clips.mix(want, True, None)), (start, n)


@pytest.mark.parametrize("subtype", ["PCM_S8", "PCM_16", "PCM_24"])
@pytest.mark.parametrize(("rate", "seconds", "channels"),
                         [(8000, 0.1, 1), (16000, 3.3, 2), (22050, 1.0, 3), (44100, 20.0, 1),
                          (48000, 2.5, 2)])
def test_flac_equals_soundfile_bit_for_bit(subtype: str, rate: int, seconds: float,
                                           channels: int) -> None:
    wave = signal(rate, seconds, channels, seed=rate % 7)
    assert_same(encode(wave, rate, "FLAC", subtype), len(wave), channels)


@pytest.mark.parametrize("mode", sorted(STEREO_MODES))
def test_every_stereo_mode_equals_soundfile(mode: str) -> None:
    data = encode(stereo(mode), 16000, "FLAC", "PCM_16")
    _, _, modes = native(data, 0, 32000, 2)
    assert modes & STEREO_MODES[mode]  # the encoder did pick the mode this case is about
    assert_same(data, 32000, 2)


@pytest.mark.parametrize("compression", [0.0, 1.0])
def test_flac_of_other_block_sizes_and_orders_equals_soundfile(compression: float) -> None:
    """libsndfile's fastest and best settings: other block sizes, FIXED and long-LPC frames."""
    wave = signal(44100, 1.7, 2, seed=3)
    out = io.BytesIO()
    sf.write(out, wave, 44100, format="FLAC", subtype="PCM_24", compression_level=compression)
    assert_same(out.getvalue(), len(wave), 2)


@pytest.mark.parametrize(("container", "subtype"),
                         [("WAV", "PCM_U8"), ("WAV", "PCM_16"), ("WAV", "PCM_24"),
                          ("WAV", "PCM_32"), ("WAV", "FLOAT"), ("WAV", "DOUBLE"),
                          ("WAVEX", "PCM_24"), ("WAVEX", "FLOAT")])
@pytest.mark.parametrize("channels", [1, 2])
def test_wav_equals_soundfile_bit_for_bit(container: str, subtype: str, channels: int) -> None:
    wave = signal(16000, 1.3, channels, seed=channels)
    assert_same(encode(wave, 16000, container, subtype), len(wave), channels)


def test_a_flac_seek_decodes_only_the_frames_of_the_crop() -> None:
    data = clip(16000, 20.0, 1, "flac", seed=1)  # 79 frames of 4096
    _, blocks, _ = native(data, 300000, 16000, 1)  # 1 s inside frames 73-77
    assert blocks == 5
    _, blocks, _ = native(data, 319990, 10, 1)  # the last frame's last samples
    assert blocks == 1
    _, blocks, _ = native(data, BLOCK * 40 + 5, 3, 1)  # inside one frame
    assert blocks == 1


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _with_seek_table(data: bytes, shift: int = 0) -> bytes:
    """The clip with a SEEKTABLE after STREAMINFO: a point every 8 frames (frame numbers under
    128, one UTF-8 byte), its offsets moved by `shift` bytes (a wrong table if not 0)."""
    audio_at, at = 0, 4
    while not audio_at:  # the first frame follows the last metadata block
        last, length = data[at] & 0x80, int.from_bytes(data[at + 1: at + 4], "big")
        at += 4 + length
        audio_at = at if last else 0
    points = b""
    for number in range(8, 80, 8):
        at = data.find(bytes([0xFF, 0xF8]), audio_at)
        while not (data[at + 4] == number and _crc8(data[at: at + 5]) == data[at + 5]):
            at = data.find(bytes([0xFF, 0xF8]), at + 1)
        points += (number * BLOCK).to_bytes(8, "big") + (at - audio_at + shift).to_bytes(8, "big")
        points += BLOCK.to_bytes(2, "big")
    table = bytes([3]) + len(points).to_bytes(3, "big") + points
    info_end = 4 + 4 + 34
    head = bytearray(data[:info_end])
    if head[4] & 0x80:  # STREAMINFO was the last block: the table is now
        head[4] &= 0x7F
        table = bytes([0x83]) + table[1:]
    return bytes(head) + table + data[info_end:]


@pytest.mark.parametrize("shift", [0, 7])
def test_a_seek_table_right_or_wrong_gives_the_same_samples(shift: int) -> None:
    """A table's points start the search where they hold a frame header of their sample; a
    wrong one (offsets 7 bytes off) lands on no header, and the search finds the frame anyway."""
    data = clip(16000, 20.0, 1, "flac", seed=6)
    tabled = _with_seek_table(data, shift)
    for start, n in [(300000, 16000), (BLOCK * 33 + 17, 9000), (5, 100)]:
        got, blocks, _ = native(tabled, start, n, 1)
        assert np.array_equal(got, reference(data, start, n))
        assert blocks <= n // BLOCK + 2


def test_an_id3_tag_before_the_flac_stream_is_skipped() -> None:
    data = clip(22050, 1.0, 2, "flac", seed=2)
    tagged = id3_tag() + data
    assert np.array_equal(native(tagged, 100, 5000, 2)[0], reference(data, 100, 5000))


@pytest.mark.parametrize(("fmt", "subtype"), [("mp3", None), ("ogg", None), ("wav", "ULAW"),
                                              ("wav", "MS_ADPCM")])
def test_other_clips_are_left_to_soundfile(fmt: str, subtype: str | None) -> None:
    """The rule: the native decoder says LEFT, and decode() then reads the clip with soundfile."""
    if subtype is None:
        data = clip(16000, 0.5, 1, fmt)
    else:
        data = encode(signal(8000, 0.5, 1), 8000, "WAV", subtype)
    out = np.empty((1, 100), np.float32)
    assert audio_native.decode_into(data, 0, 100, out, False) is None
    assert audio_native.decode(data, 0, 100) is None
    assert np.array_equal(clips.decode(data, 10, 100), reference(data, 10, 100))


def _streaminfo(data: bytes, **fields: int) -> bytes:
    """A FLAC clip with STREAMINFO's min block, sample bits or sample count rewritten."""
    blob = bytearray(data)
    info = 8  # "fLaC" and the block's 4-byte header
    if "min_block" in fields:
        blob[info: info + 2] = fields["min_block"].to_bytes(2, "big")
    if "bits" in fields:
        blob[info + 12] = (blob[info + 12] & 0xFE) | ((fields["bits"] - 1) >> 4)
        blob[info + 13] = (blob[info + 13] & 0x0F) | (((fields["bits"] - 1) & 15) << 4)
    if "total" in fields:
        blob[info + 13] &= 0xF0
        blob[info + 14: info + 18] = fields["total"].to_bytes(4, "big")
    return bytes(blob)


@pytest.mark.parametrize(("fields", "why"), [({"bits": 12}, "12-bit"), ({"bits": 20}, "20-bit"),
                                             ({"total": 0}, "no sample count"),
                                             ({"min_block": 1024}, "range of block sizes")])
def test_flac_features_not_implemented_are_left_to_soundfile(fields: dict[str, int],
                                                             why: str) -> None:
    data = _streaminfo(clip(16000, 1.0, 1, "flac"), **fields)
    core = audio_native.core()
    assert core is not None
    out = np.empty((1, 100), np.float32)
    status, _, _, _, message = core.audio_decode(data, 0, 100, out, False)
    assert status == audio_native.LEFT and why in message
    assert audio_native.decode_into(data, 0, 100, out, False) is None


def _flac_frames_damaged(data: bytes) -> bytes:
    blob = bytearray(data)
    blob[len(blob) // 2] ^= 0x10  # one bit inside a frame: its CRC-16 no longer matches
    return bytes(blob)


def _first_header_damaged(data: bytes) -> bytes:
    blob = bytearray(data)
    blob[data.find(b"\xff\xf8") + 3] ^= 0x20  # the first frame's sample size: its CRC-8 fails
    return bytes(blob)


@pytest.mark.parametrize(("damage", "match"), [
    (lambda d: d[: len(d) - 200], "FLAC frame at byte .* is damaged"),
    (_flac_frames_damaged, "FLAC frame at byte .* is damaged"),
    (lambda d: d[:30], "FLAC metadata"),
    (_first_header_damaged, "FLAC frame at byte .* no valid frame header"),
])
def test_damaged_flac_is_refused_by_name(damage: Any, match: str) -> None:
    data = damage(clip(16000, 1.0, 1, "flac", seed=5))
    with pytest.raises(DecodeError, match=match):
        clips.decode(data, 0, 16000)


def test_damaged_wav_is_refused_by_name() -> None:
    data = clip(16000, 0.2, 1, "wav")
    with pytest.raises(DecodeError, match="fmt chunk"):
        clips.decode(data[:12] + b"fmt \x04\x00\x00\x00abcd" + data[36:], 0, 10)
    with pytest.raises(DecodeError, match="no data chunk"):
        clips.decode(data[:36], 0, 10)


@pytest.mark.parametrize("fmt", ["WAV", "FLAC"])
def test_eight_channels_are_decoded_but_mixed_to_mono_by_soundfile(fmt: str) -> None:
    """numpy's mean of 8 or more channels sums pairwise: such a mix is left to soundfile's path
    (LEFT), while the channels kept decode natively."""
    wave = signal(8000, 0.4, 8, seed=8)
    data = encode(wave, 8000, fmt, "PCM_16")
    assert audio_native.decode_into(data, 0, 3200, np.empty((1, 3200), np.float32), True) is None
    kept = native(data, 5, 3000, 8)[0]
    assert np.array_equal(kept, reference(data, 5, 3000))


def test_a_mono_clip_is_repeated_and_other_channels_refused() -> None:
    data = clip(8000, 0.3, 1, "flac")
    core = audio_native.core()
    assert core is not None
    out = np.empty((3, 2400), np.float32)
    assert core.audio_decode(data, 0, 2400, out, False)[0] == audio_native.DECODED
    assert np.array_equal(out, np.repeat(reference(data, 0, 2400).T, 3, axis=0))
    stereo_clip = clip(8000, 0.3, 2, "wav")
    with pytest.raises(DecodeError, match="has 2 channels, the loader wants 3"):
        audio_native.decode_into(stereo_clip, 0, 2400, out, False)


@pytest.mark.parametrize(("fmt", "audio"), [
    ("flac", {"sample_rate": 16000, "crop_seconds": 0.7, "random_crop": True}),
    ("flac", {"sample_rate": None, "mono": False}),
    ("wav", {"sample_rate": 16000, "crop_seconds": 0.5, "random_crop": True}),
    ("wav", {"sample_rate": 16000, "dtype": "int16"}),
])
def test_the_loader_gives_the_batches_of_the_soundfile_path(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, fmt: str, audio: dict[str, Any]) -> None:
    from fastloader import Audio, FastLoader
    from fastloader.pack.api import pack

    rates = (16000, 22050, 44100) if audio["sample_rate"] else (16000,)
    datas = [clip(rates[i % len(rates)], 0.4 + i / 7, 2, fmt, seed=i) for i in range(7)]
    root = tmp_path / "clips.lmdb"
    pack([{"audio": d, "text": f"t{i}"} for i, d in enumerate(datas)], root,
         fields={"audio": "audio", "text": "text"})

    def batches(backend: str) -> list[Any]:
        with FastLoader(root, batch_size=3, device="cpu", fields=["audio", "text"],
                        audio=Audio(**audio)) as loader:
            assert loader.stats().backend == backend
            return [(w.numpy(), n.numpy()) for (w, n), _ in loader]

    ours = batches("native")
    monkeypatch.setattr(audio_native, "core", lambda: None)  # every clip through soundfile
    theirs = batches("soundfile")
    assert len(ours) == len(theirs) == 3
    for (wave, lengths), (want, want_lengths) in zip(ours, theirs, strict=True):
        assert np.array_equal(lengths, want_lengths)
        assert wave.dtype == want.dtype and np.array_equal(wave, want)


def test_decode_into_a_callers_buffer_is_native_for_flac() -> None:
    data = clip(16000, 1.0, 2, "flac", seed=9)
    out = np.full((500, 2), np.nan, np.float32)
    got = clips.decode(data, 15900, 500, out=out)  # the clip ends after 100 frames
    assert got.shape == (100, 2) and np.shares_memory(got, out)
    assert np.array_equal(got, reference(data, 15900, 500))
