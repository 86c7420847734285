"""The video loader (FastLoader(path, video=fastloader.Video(...))) on clips PyAV makes: windows
bit-exact against a plain decode before any resize and within MAE 2 of Pillow's bilinear after,
timestamps right on variable frame rate, one crop and flip a clip, the same batches whatever
the threads or ranks, resumed exactly, damaged clips named or skipped, bad settings refused."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("av")

import fastloader
from fastloader import FastLoader, Video
from fastloader.decode.video import probe
from fastloader.errors import DecodeError, InvalidArgumentError, InvalidTypeError
from fastloader.loader.clips.video_batch import plan_starts
from videogen import make_clip, reference

FIELDS = {"video": "video", "label": "int"}
CROP = [fastloader.CenterCrop((40, 46))]  # a slice of every video: no resize
VFR_PTS = [0, 10, 15, 40, 45, 50, 90, 100, 130, 135, 140, 170]  # 1/80 s units


def _clips() -> list[bytes]:
    """H.264 and VP9, constant and variable rate, odd and even sizes, one shorter than a
    window of 8 x 2 frames."""
    return [make_clip("libx264", frames=40, width=64, height=48),
            make_clip("libvpx-vp9", frames=30, width=48, height=40),
            make_clip("libx264", frames=len(VFR_PTS), width=64, height=48, pts=VFR_PTS),
            make_clip("libx264", frames=6, width=64, height=48),
            make_clip("libx264", frames=25, width=63, height=47, gop=5),
            make_clip("libx264", frames=33, width=64, height=48, gop=12)]


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    datas = _clips()
    root = tmp_path_factory.mktemp("videos") / "v.lmdb"
    fastloader.pack([{"video": d, "label": i} for i, d in enumerate(datas)], root, fields=FIELDS)
    return root, datas


@contextlib.contextmanager
def _loader(root: Path, **kwargs: Any) -> Iterator[Any]:
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("transforms", CROP)  # the videos are of three sizes
    with FastLoader(root, **kwargs) as loader:
        yield loader


def _by_label(root: Path, **kwargs: Any) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each video's (frames, timestamps) of one pass, by its label (its index)."""
    out = {}
    with _loader(root, **kwargs) as loader:
        for (frames, times), labels in loader:
            for k, label in enumerate(labels.tolist()):
                out[label] = (frames[k].numpy(), times[k].numpy())
    return out


def _frames_at(data: bytes, times: np.ndarray) -> np.ndarray:
    """The reference decode's frames at the given timestamps (seconds), [T, H, W, 3]."""
    frames = reference(data)
    info = probe(data)
    seconds = info.seconds(info.pts)
    at = [int(info.pts[np.argmin(np.abs(seconds - t))]) for t in times.tolist()]
    assert np.abs(info.seconds(at) - times).max() < 1e-4  # each timestamp is a frame's
    return np.stack([frames[p] for p in at])


def test_cropped_frames_equal_a_plain_decode_bit_exactly(videos: Any) -> None:
    """A crop without a resize is a slice of the decoded frame (mirrored when flipped):
    bit-exact on every codec, size and rate (the VP9 clip is 48x40, the odd one 63x47)."""
    root, datas = videos
    video = Video(frames=8, stride=2, layout="THWC")
    flips = []
    with _loader(root, batch_size=2, video=video, num_threads=2, seed=1,
                 transforms=[*CROP, fastloader.RandomHorizontalFlip()]) as loader:
        for (frames, times), labels in loader:
            for k, label in enumerate(labels.tolist()):
                rng = np.random.Generator(np.random.PCG64([1, 0, label]))
                plan_starts(loader._decoder.meta[label], video, rng)
                view = loader._decoder.view(label, rng)
                top, left, height, width = view.crop
                want = _frames_at(datas[label], times[k].numpy())
                want = want[:, top:top + height, left:left + width]
                flips.append(view.flip)
                if view.flip:
                    want = want[:, :, ::-1]
                assert frames[k].numpy().shape == want.shape == (8, 40, 46, 3)
                np.testing.assert_array_equal(frames[k].numpy(), want)
    assert len(flips) == 6 and set(flips) == {True, False}


def test_stride_windows_step_through_the_frames_and_repeat_the_last(videos: Any) -> None:
    root, _ = videos
    got = _by_label(root, batch_size=2, video=Video(frames=8, stride=2, random=False))
    # clip 0: 40 frames at 8 fps, centred window of 15 frames: start (40 - 15) // 2 = 12
    np.testing.assert_allclose(got[0][1], (12 + 2 * np.arange(8)) / 8)
    # clip 3: 6 frames, shorter than the window: from 0, its last frame (5/8 s) repeated
    np.testing.assert_allclose(got[3][1], np.minimum(2 * np.arange(8), 5) / 8)
    frames = got[3][0]
    np.testing.assert_array_equal(frames[3], frames[7])  # both the last frame


def test_fps_windows_take_the_frame_on_screen_on_variable_frame_rate(videos: Any) -> None:
    root, datas = videos
    got = _by_label(root, batch_size=3, video=Video(frames=6, fps=4.0, random=False))
    times = got[2][1]
    pts = np.array(VFR_PTS) / 80  # seconds
    span = (VFR_PTS[-1] + 10) / 80  # the last frame lasts its packet's duration (10)
    start = (span - 6 / 4.0) / 2
    want = [pts[np.searchsorted(pts, start + k / 4.0 + 1e-9, side="right") - 1] for k in range(6)]
    np.testing.assert_allclose(times, want, atol=1e-6)
    reference_frames = _frames_at(datas[2], times)[:, 4:44, 9:55]  # CROP of 48 x 64
    frames = got[2][0].transpose(0, 2, 3, 1)  # TCHW -> THWC
    np.testing.assert_array_equal(frames, reference_frames)


def _bilinear(frame: np.ndarray, box: tuple[int, int, int, int], size: int) -> np.ndarray:
    from PIL import Image

    top, left, height, width = box
    cut = Image.fromarray(np.ascontiguousarray(frame[top:top + height, left:left + width]))
    return np.asarray(cut.resize((size, size), Image.BILINEAR))


def test_one_crop_and_flip_per_video_within_mae_2_of_pillow(videos: Any) -> None:
    root, datas = videos
    transforms = [fastloader.RandomResizedCrop(24, scale=(0.3, 0.8)),
                  fastloader.RandomHorizontalFlip()]
    video = Video(frames=4, stride=3, layout="THWC")
    flips = set()
    with _loader(root, batch_size=3, video=video, transforms=transforms, seed=5) as loader:
        decoder = loader._decoder
        for (frames, times), labels in loader:
            for k, label in enumerate(labels.tolist()):
                rng = np.random.Generator(np.random.PCG64([5, 0, label]))
                plan_starts(decoder.meta[label], video, rng)
                view = decoder.view(label, rng)
                flips.add(view.flip)
                want = _frames_at(datas[label], times[k].numpy())
                for t in range(4):
                    expect = _bilinear(want[t], view.crop, 24)
                    if view.flip:
                        expect = expect[:, ::-1]
                    error = np.abs(frames[k, t].numpy().astype(int) - expect.astype(int)).mean()
                    assert error <= 2.0, (label, t, error)
    assert flips == {True, False}  # both seen, each applied to a whole clip


def test_windows_and_crops_follow_seed_epoch_and_sample_only(videos: Any) -> None:
    root, _ = videos
    kwargs: dict[str, Any] = {"video": Video(frames=4, stride=2),
                              "transforms": [fastloader.RandomResizedCrop(16),
                                             fastloader.RandomHorizontalFlip()]}
    one = _by_label(root, batch_size=1, num_threads=1, seed=3, **kwargs)
    other = _by_label(root, batch_size=4, num_threads=2, shuffle=True, seed=3, **kwargs)
    ranks = {}
    for rank in (0, 1):
        ranks.update(_by_label(root, batch_size=2, rank=rank, world_size=2, seed=3, **kwargs))
    for label, (frames, times) in one.items():
        for seen in (other, ranks):
            np.testing.assert_array_equal(seen[label][0], frames)
            np.testing.assert_array_equal(seen[label][1], times)
    reseeded = _by_label(root, batch_size=1, seed=4, **kwargs)
    assert any(not np.array_equal(reseeded[k][0], one[k][0]) for k in one)
    with _loader(root, batch_size=6, **kwargs, seed=3) as loader:
        first = next(iter(loader))
        loader.set_epoch(1)
        second = next(iter(loader))
    assert not np.array_equal(first[0][1].numpy(), second[0][1].numpy())


def test_the_ranks_split_an_epoch_into_equal_steps(videos: Any) -> None:
    root, _ = videos
    seen = []
    for rank in (0, 1, 2, 3):
        with _loader(root, batch_size=1, rank=rank, world_size=4, shuffle=True,
                     video=Video(frames=2), transforms=[fastloader.Resize((16, 16))]) as loader:
            labels = [int(b[1][0]) for b in loader]
            assert len(labels) == len(loader) == 2  # 6 videos on 4 ranks, padded
            seen += labels
    assert set(seen) == set(range(6))


def test_a_pass_resumes_exactly_and_on_another_world_size(videos: Any) -> None:
    root, _ = videos
    kwargs: dict[str, Any] = {"batch_size": 1, "shuffle": True, "seed": 9,
                              "video": Video(frames=3), "transforms": [fastloader.Resize(16)]}
    kwargs["transforms"].append(fastloader.CenterCrop(16))
    with _loader(root, **kwargs) as loader:
        whole = [(int(b[1][0]), b[0][0].numpy()) for b in loader]
    with _loader(root, **kwargs) as loader:
        it = iter(loader)
        for _ in range(2):
            next(it)
        state = loader.state_dict()
    with _loader(root, **kwargs) as resumed:
        resumed.load_state_dict(state)
        rest = [(int(b[1][0]), b[0][0].numpy()) for b in resumed]
    assert [label for label, _ in rest] == [label for label, _ in whole[2:]]
    for (_, got), (_, want) in zip(rest, whole[2:], strict=True):
        np.testing.assert_array_equal(got, want)
    labels = []
    for rank in (0, 1):
        with _loader(root, rank=rank, world_size=2, **kwargs) as loader:
            loader.load_state_dict(state)
            labels += [int(b[1][0]) for b in loader]
    assert sorted(labels) == sorted(label for label, _ in whole[2:])


def test_clips_layouts_and_float_output(videos: Any) -> None:
    root, _ = videos
    resize = [fastloader.Resize((20, 28))]
    with _loader(root, batch_size=2, video=Video(frames=4, clips=3, random=False),
                 transforms=resize) as loader:
        (frames, times), _ = next(iter(loader))
    assert frames.shape == (2, 3, 4, 3, 20, 28) and times.shape == (2, 3, 4)
    assert (times[:, 1:, 0] > times[:, :-1, 0]).all()  # spread over the video
    with _loader(root, batch_size=2, video=Video(frames=4, layout="CTHW", dtype="float32",
                                                 random=False), transforms=resize) as loader:
        (floats, _), _ = next(iter(loader))
    assert floats.shape == (2, 3, 4, 20, 28) and floats.dtype.is_floating_point
    with _loader(root, batch_size=2, video=Video(frames=4, random=False),
                 transforms=resize) as loader:
        (bytes_, _), _ = next(iter(loader))
    np.testing.assert_allclose(floats.permute(0, 2, 1, 3, 4).numpy(),
                               bytes_.numpy().astype(np.float32) / 255, atol=1e-6)


def test_videos_of_other_sizes_need_transforms_to_one(videos: Any) -> None:
    root, _ = videos
    with pytest.raises(InvalidArgumentError, match="transforms"):
        FastLoader(root, device="cpu", video=Video())


def _damage(root: Path, data: bytes) -> None:
    """Overwrite a clip's frames in its shard (its crc32 left stale)."""
    shard = next(root.glob("*.h5"))
    blob = bytearray(shard.read_bytes())
    at = blob.find(data)
    assert at > 0
    blob[at + 48: at + len(data)] = bytes(len(data) - 48)
    shard.write_bytes(bytes(blob))


def test_a_damaged_video_is_named_or_skipped(tmp_path: Path) -> None:
    datas = [make_clip("libx264", frames=12 + i, width=32, height=32) for i in range(4)]
    root = tmp_path / "v.h5"
    fastloader.pack([{"video": d, "label": i} for i, d in enumerate(datas)], root,
                    fields=FIELDS)
    _damage(root, datas[2])
    video = Video(frames=4)
    with pytest.raises(DecodeError, match=r"sample 2 .*on_error='skip'"), \
            _loader(root, batch_size=2, video=video) as loader:
        list(loader)
    with pytest.raises(DecodeError) as caught, \
            _loader(root, batch_size=2, video=video, verify_records=True) as loader:
        list(loader)
    said = str(caught.value)  # the record's checksum fails: named once, one full stop
    assert said.count("record 2 (") == 1 and "fails its crc32 check" in said
    assert ".." not in said
    assert "[fastloader producer: stage 'decode', batch 1]" in said  # the one producer's
    with _loader(root, batch_size=2, video=video, on_error="skip") as loader:
        labels = [label for _, batch in loader for label in batch.tolist()]
        assert loader.stats().skipped == 1
    assert labels == [0, 1, 3, 3]  # replaced by the next video


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"video": Video, "frames": 0}, r"frames"),
    ({"video": Video, "stride": 2, "fps": 4.0}, r"stride= or fps="),
    ({"video": Video, "fps": -1.0}, r"fps"),
    ({"video": Video, "layout": "NCHW"}, r"layout"),
    ({"video": Video, "dtype": "float16"}, r"dtype"),
])
def test_bad_video_settings_are_refused(kwargs: dict[str, Any], match: str) -> None:
    build = kwargs.pop("video")
    with pytest.raises(InvalidArgumentError, match=match):
        build(**kwargs)


def test_wrong_arguments_name_the_video_loader(videos: Any, tmp_path: Path) -> None:
    root, _ = videos
    with pytest.raises(InvalidTypeError, match="video"):
        FastLoader(root, device="cpu", video={"frames": 4})
    with pytest.raises(InvalidArgumentError, match="ResizeFit"):
        FastLoader(root, device="cpu", video=Video(), transforms=[fastloader.ResizeFit(32)])
    with pytest.raises(InvalidArgumentError, match="audio= and video="):
        FastLoader(root, device="cpu", video=Video(), audio=fastloader.Audio())
    with pytest.raises(InvalidArgumentError, match=r"max_batch_seconds.*audio loader only"):
        FastLoader(root, device="cpu", video=Video(), max_batch_seconds=3.0)
    with pytest.raises(InvalidArgumentError, match=r"holds videos, not images\. Pass "
                                                   r"video=fastloader\.Video\(\.\.\.\)"):
        FastLoader(root, device="cpu")
    with pytest.raises(InvalidArgumentError, match=r"holds videos, not audio clips\. Pass "
                                                   r"video=fastloader\.Video"):
        FastLoader(root, device="cpu", audio=fastloader.Audio())


def test_the_video_loader_refuses_images_naming_the_packed_loader(dataset_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"holds images, not videos\. Drop video= "
                                                   r"to load its images with the packed loader"):
        FastLoader(dataset_path, device="cpu", video=Video())


def test_constant_rate_videos_are_addressed_from_the_index_alone(
        videos: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A constant-frame-rate video is decoded without demuxing it first (its frames' pts from
    its meta row, the seek by the container's index); only the variable-rate one is probed."""
    root, _ = videos
    from fastloader.decode import video as decode_video

    probed: list[int] = []
    real = decode_video.probe

    def probe(data: bytes, what: str = "video") -> Any:
        probed.append(int(what.split()[-1]))
        return real(data, what)

    monkeypatch.setattr(decode_video, "probe", probe)
    got = _by_label(root, batch_size=3, video=Video(frames=4, stride=3), seed=2)
    assert sorted(got) == list(range(6))
    assert probed == [2]  # the VFR clip, once


def test_a_twenty_second_video_and_a_one_second_one(tmp_path: Path) -> None:
    """The lengths the issue names, 1-20 s: windows reach the end of a 20 s video (its last
    frames, by stride and by time) bit-exactly, and a 1 s one repeats its last frame."""
    long, short = (make_clip("libx264", frames=80, width=32, height=32, rate=4, gop=16),
                   make_clip("libx264", frames=4, width=32, height=32, rate=4))
    root = tmp_path / "lengths.lmdb"
    fastloader.pack([{"video": long, "label": 0}, {"video": short, "label": 1}], root,
                    fields=FIELDS)
    seconds = {}
    for video in (Video(frames=8, stride=10, layout="THWC", random=False),
                  Video(frames=8, fps=0.4, layout="THWC", random=False)):
        with _loader(root, batch_size=2, video=video, transforms=None) as loader:
            (frames, times), _ = next(iter(loader))
        for k, data in enumerate((long, short)):
            np.testing.assert_array_equal(frames[k].numpy(), _frames_at(data, times[k].numpy()))
        seconds[video.fps] = times.numpy()
    # by stride: 71 frames spanned, centred in 80: from frame 4 to 74 (18.5 s)
    np.testing.assert_allclose(seconds[None][0], (4 + 10 * np.arange(8)) / 4)
    # by time: 8 frames 2.5 s apart span 20 s, the whole video: from 0 s
    np.testing.assert_allclose(seconds[0.4][0], 2.5 * np.arange(8))
    np.testing.assert_allclose(seconds[None][1], np.minimum(10 * np.arange(8), 3) / 4)
