"""decode/video.py: probe's frame index, the pack-time check, clip plans and windowed decode."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fastloader.decode import video
from fastloader.errors import DecodeError, InvalidArgumentError
from videogen import keyframes, make_clip, reference

av = pytest.importorskip("av", reason="PyAV (the video extra) is a test dependency")

# irregular gaps (units of 1/80 s): a variable frame rate clip
VFR_PTS = [0, 10, 13, 30, 31, 55, 60, 90, 92, 93, 120, 170, 171, 200, 260, 262, 270, 300]
CLIPS = {
    "h264": dict(codec="libx264", frames=40, width=64, height=48),
    "h264_odd": dict(codec="libx264", frames=24, width=63, height=45),
    "vp9_odd": dict(codec="libvpx-vp9", frames=40, width=63, height=45),
    "h264_vfr": dict(codec="libx264", frames=len(VFR_PTS), pts=VFR_PTS),
    "vp9_vfr": dict(codec="libvpx-vp9", frames=len(VFR_PTS), pts=VFR_PTS),
}


@pytest.fixture(scope="module", params=sorted(CLIPS))
def clip(request: pytest.FixtureRequest) -> tuple[bytes, dict[int, np.ndarray]]:
    data = make_clip(**CLIPS[request.param])  # type: ignore[arg-type]
    return data, reference(data)


def test_probe_matches_a_full_decode(clip: tuple[bytes, dict[int, np.ndarray]]) -> None:
    data, ref = clip
    info = video.check(data)
    assert info.pts.tolist() == sorted(ref)
    assert info.keyframes.tolist() == keyframes(data)
    assert len(info.keyframes) > 1  # several GOPs, so seeking is exercised
    assert (info.width, info.height) == next(iter(ref.values())).shape[1::-1]
    assert info.frames == len(ref)
    assert info.duration == pytest.approx(info.duration_pts * float(info.time_base))
    assert info.duration > info.seconds(info.pts[-1]) - info.seconds(info.pts[0])


def test_constant_rate_facts() -> None:
    info = video.probe(make_clip("libx264", frames=24, rate=8))
    assert info.codec == "h264" and info.fps == pytest.approx(8.0)
    assert info.duration == pytest.approx(3.0)


@pytest.mark.parametrize("start", [0.0, 0.9, 2.0])
def test_windows_equal_the_reference_bit_exactly(clip: tuple[bytes, dict[int, np.ndarray]],
                                                 start: float) -> None:
    data, ref = clip
    info = video.probe(data)
    for plan in (video.plan_clip(info, 6, stride=2, start=start),
                 video.plan_clip(info, 5, fps=3.0, start=start)):
        frames, seconds = video.decode_clip(data, info, plan)
        assert frames.shape == (len(plan), info.height, info.width, 3)
        for slot, pts in enumerate(plan.tolist()):
            np.testing.assert_array_equal(frames[slot], ref[pts])
        assert seconds.tolist() == pytest.approx([p * float(info.time_base) for p in plan])


def test_resized_windows_are_near_pillow_bilinear(
        clip: tuple[bytes, dict[int, np.ndarray]]) -> None:
    data, ref = clip
    info = video.probe(data)
    plan = video.plan_clip(info, 4, stride=3, start=0.5)
    frames, _ = video.decode_clip(data, info, plan, size=(24, 32))
    for slot, pts in enumerate(plan.tolist()):
        want = np.asarray(Image.fromarray(ref[pts]).resize((32, 24), Image.BILINEAR))
        assert np.abs(frames[slot].astype(int) - want).mean() < 2


def test_vfr_plans_address_frames_by_time() -> None:
    info = video.probe(make_clip("libx264", frames=len(VFR_PTS), pts=VFR_PTS))
    scale = info.time_base.denominator // 80 // info.time_base.numerator
    # times 40, 60, 80, 100, 120 (in 1/80 s): the frame on screen is the last one at or before
    plan = video.plan_clip(info, 5, fps=4.0, start=0.5)
    assert (plan // scale).tolist() == [31, 60, 60, 93, 120]
    # every 4th frame from the first at or after 0.5 s
    stride = video.plan_clip(info, 3, stride=4, start=0.5)
    assert (stride // scale).tolist() == [55, 93, 200]
    _, seconds = video.decode_clip(make_clip("libx264", frames=len(VFR_PTS), pts=VFR_PTS),
                                   info, plan)
    assert seconds.tolist() == pytest.approx([31 / 80, 60 / 80, 60 / 80, 93 / 80, 120 / 80])


def test_a_clip_shorter_than_the_window_repeats_its_last_frame() -> None:
    data = make_clip("libx264", frames=5)
    info = video.probe(data)
    ref = reference(data)
    plan = video.plan_clip(info, 8, stride=2)
    assert plan.tolist() == [info.pts[i] for i in (0, 2, 4, 4, 4, 4, 4, 4)]
    frames, seconds = video.decode_clip(data, info, plan)
    assert frames.shape[0] == 8 and seconds[-1] == seconds[2]
    for slot in range(2, 8):
        np.testing.assert_array_equal(frames[slot], ref[int(info.pts[4])])


def test_a_truncated_file_is_refused_by_name() -> None:
    data = make_clip("libx264", frames=40)
    with pytest.raises(DecodeError, match=r"clip_7\.mp4"):
        video.check(data[: len(data) * 2 // 3], what="clip_7.mp4")


def test_a_webm_cluster_the_demuxer_skips_is_refused_by_name() -> None:
    """A damaged Matroska cluster is resynced past with no error: its frames are simply gone
    (probe and decode agree on the rest). Only FFmpeg's log says so, and check() reads it."""
    data = make_clip("libvpx-vp9", frames=40, width=64, height=48)
    damaged = None
    for at in range(len(data) // 3, len(data) * 3 // 4, 97):
        candidate = data[:at] + bytes(200) + data[at + 200:]
        try:
            if video.probe(candidate).frames < 40:  # a cluster dropped without an error
                damaged = candidate
                break
        except DecodeError:
            continue
    assert damaged is not None
    with pytest.raises(DecodeError, match=r"clip_5\.webm: FFmpeg's matroska,webm reports damage"
                                          r" \(.*EBML.*\); the file is damaged"):
        video.check(damaged, what="clip_5.webm")
    assert av.logging.get_level() is None  # FFmpeg's log is off again, as PyAV leaves it
    assert video.check(data).frames == 40  # the whole clip passes


def test_a_truncated_stream_is_refused_by_check_and_decode(tmp_path: Path) -> None:
    # the index first, then the frames: the cut keeps the index and loses the later frames
    data = make_clip("libx264", frames=40, faststart_path=str(tmp_path / "fast.mp4"))
    info = video.check(data)
    cut = data[: len(data) * 3 // 5]
    with pytest.raises(DecodeError, match=r"clip_8\.mp4.*truncated"):
        video.check(cut, what="clip_8.mp4")
    late = video.plan_clip(info, 4, stride=2, start=4.0)
    with pytest.raises(DecodeError, match=r"clip_8\.mp4.*did not decode"):
        video.decode_clip(cut, info, late, what="clip_8.mp4")
    early = video.plan_clip(info, 4, stride=1)  # the intact part still decodes
    assert video.decode_clip(cut, info, early)[0].shape[0] == 4


def test_not_a_video_is_refused() -> None:
    with pytest.raises(DecodeError, match="not a readable video"):
        video.probe(b"\x00" * 1000)
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="wav") as out:  # a container without video
        stream = out.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16",
                                           layout="mono")
        frame.sample_rate = 8000
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    with pytest.raises(DecodeError, match="no video stream"):
        video.probe(buffer.getvalue())


def test_bad_arguments_are_named() -> None:
    info = video.probe(make_clip("libx264", frames=8))
    with pytest.raises(InvalidArgumentError, match="stride"):
        video.plan_clip(info, 4)
    with pytest.raises(InvalidArgumentError, match="frames"):
        video.plan_clip(info, 0, stride=1)
    with pytest.raises(InvalidArgumentError, match="fps"):
        video.plan_clip(info, 4, fps=-1.0)
    with pytest.raises(InvalidArgumentError, match="out"):
        video.decode_clip(b"", info, [0], out=np.empty((2, 2, 2, 3), np.uint8))
