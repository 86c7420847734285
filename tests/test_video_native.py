"""fastloader._video (csrc/video/): a window decoded by libav* in one call with the GIL released
gives the very pixels PyAV's decode and RGB conversion give, leaves what it cannot convert the
same way to PyAV, and names damaged bytes; the loader takes it where it is built."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from fastloader.decode import video, video_native
from fastloader.errors import DecodeError
from videogen import make_clip, reference

pytest.importorskip("av", reason="PyAV (the video extra) is a test dependency")
pytestmark = [
    pytest.mark.native,
    pytest.mark.skipif(video_native.module() is None,
                       reason="fastloader._video is not built here (FFmpeg's development "
                              "files were missing at build time) or the extension is disabled: "
                              "video decodes through PyAV"),
]

VFR_PTS = [0, 10, 13, 30, 31, 55, 60, 90, 92, 93, 120, 170, 171, 200, 260, 262, 270, 300]
CLIPS = {  # the ones the native path converts itself (even sizes, or no chroma subsampling)
    "h264": dict(codec="libx264", frames=40, width=64, height=48),
    "h264_340": dict(codec="libx264", frames=30, width=340, height=256, gop=12),
    "h264_odd_444": dict(codec="libx264", frames=24, width=63, height=45),
    "vp9": dict(codec="libvpx-vp9", frames=30, width=48, height=40),
    "h264_vfr": dict(codec="libx264", frames=len(VFR_PTS), pts=VFR_PTS),
}
# crops at every parity of top and left, narrow and wide (swscale's groups of 8 and row pairs)
CROPS = [(0, 0, 1.0, 1.0), (1, 3, 0.5, 0.45), (2, 5, 0.6, 0.7), (3, 2, 0.75, 0.3), (5, 7, 0.4, 1.0)]


@pytest.fixture(scope="module", params=sorted(CLIPS))
def clip(request: pytest.FixtureRequest) -> tuple[bytes, dict[int, np.ndarray]]:
    data = make_clip(**CLIPS[request.param])  # type: ignore[arg-type]
    return data, reference(data)


def _crop(info: video.VideoInfo, spec: tuple[float, ...]) -> tuple[int, int, int, int]:
    top, left, height, width = int(spec[0]), int(spec[1]), spec[2], spec[3]
    return (top, left, max(1, min(info.height - top, int(info.height * height))),
            max(1, min(info.width - left, int(info.width * width))))


def test_windows_equal_pyav_bit_exactly(clip: tuple[bytes, dict[int, np.ndarray]]) -> None:
    data, ref = clip
    info = video.probe(data)
    for first in (0, info.frames // 3, info.frames - 5):
        pts = info.pts[first:first + 9:2]
        seek = video._seek_target(info, int(pts[0]))
        for spec, flip in zip(CROPS, (False, True) * 3, strict=False):
            crop = _crop(info, spec)
            top, left, height, width = crop
            got = video_native.decode_window(data, seek, pts, crop, (height, width), flip, 1,
                                             "SLICE", "clip")
            assert got is not None, crop
            frames, found = got
            assert found.all()
            want = np.stack([ref[p][top:top + height, left:left + width] for p in pts.tolist()])
            want = want[:, :, ::-1] if flip else want
            np.testing.assert_array_equal(frames, want, err_msg=f"first {first}, crop {crop}")


def test_scaled_windows_are_pillows_bilinear_within_one_level(
        clip: tuple[bytes, dict[int, np.ndarray]]) -> None:
    from PIL import Image

    data, ref = clip
    info = video.probe(data)
    pts = info.pts[2:12:3]
    for spec, size in zip(CROPS, [(24, 24), (17, 30), (40, 9), (5, 5), (33, 20)], strict=True):
        crop = _crop(info, spec)
        top, left, height, width = crop
        got = video_native.decode_window(data, video._seek_target(info, int(pts[0])), pts, crop,
                                         size, True, 1, "SLICE", "clip")
        assert got is not None and got[1].all()
        for k, p in enumerate(pts.tolist()):
            cut = Image.fromarray(np.ascontiguousarray(ref[p][top:top + height,
                                                              left:left + width]))
            want = np.asarray(cut.resize(size[::-1], Image.BILINEAR))[:, ::-1]
            diff = np.abs(got[0][k].astype(int) - want)
            assert diff.max() <= 1, (crop, size, diff.max())


def test_the_loader_decodes_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_clip("libx264", frames=30, width=64, height=48)
    info = video.probe(data)
    calls: list[Any] = []
    real = video_native.decode_window
    monkeypatch.setattr(video_native, "decode_window",
                        lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    view = video.FrameView((3, 5, 30, 40), (20, 24), True)
    frames, _ = video.decode_clip(data, info, info.pts[4:12:2], view=view)
    assert len(calls) == 1 and frames.shape == (4, 20, 24, 3)
    monkeypatch.setattr(video_native, "_module", None)  # as where it is not built: PyAV
    again, _ = video.decode_clip(data, info, info.pts[4:12:2], view=view)
    # Pillow's bilinear here, torch's there: each within a level of Pillow's
    assert np.abs(frames.astype(int) - again).max() <= 2


def test_an_odd_size_with_subsampled_chroma_is_left_to_pyav() -> None:
    data = make_clip("libvpx-vp9", frames=12, width=47, height=33)  # 4:2:0 at odd sizes
    info = video.probe(data)
    assert video_native.decode_window(data, 0, info.pts[:4], (0, 0, 33, 47), (33, 47), False,
                                      1, "SLICE", "clip") is None
    frames, _ = video.decode_clip(data, info, info.pts[:4])  # the caller falls back
    ref = reference(data)
    np.testing.assert_array_equal(frames, np.stack([ref[p] for p in info.pts[:4].tolist()]))


def test_damaged_bytes_are_named(capfd: pytest.CaptureFixture[str]) -> None:
    data = make_clip("libx264", frames=40, width=64, height=48)
    info = video.probe(data)
    capfd.readouterr()
    with pytest.raises(DecodeError, match=r"clip_9\.mp4: not a readable video container"):
        video_native.decode_window(b"\x00" * 500, 0, info.pts[:2], (0, 0, 48, 64), (48, 64),
                                   False, 1, "SLICE", "clip_9.mp4")
    assert capfd.readouterr().err == ""  # the error says it; FFmpeg's own line does not too
    # the frames' bytes cut off: the window's frames are missing, and decode_clip says so
    cut = data[:len(data) // 3]
    with pytest.raises(DecodeError, match=r"clip_9\.mp4: .*(did not decode|damaged)"):
        video.decode_clip(cut, info, info.pts[-6:], what="clip_9.mp4")


def test_threads_decode_side_by_side() -> None:
    datas = [make_clip("libx264", frames=24 + k, width=64, height=48) for k in range(4)]
    infos = [video.probe(d) for d in datas]
    alone = [video_native.decode_window(d, 0, i.pts[::3], (1, 1, 40, 50), (20, 25), True, 1,
                                        "SLICE", "c") for d, i in zip(datas, infos, strict=True)]
    together: list[Any] = [None] * 4

    def run(k: int) -> None:
        for _ in range(5):
            together[k] = video_native.decode_window(datas[k], 0, infos[k].pts[::3],
                                                     (1, 1, 40, 50), (20, 25), True, 1,
                                                     "SLICE", "c")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for one, other in zip(alone, together, strict=True):
        assert one is not None and other is not None
        np.testing.assert_array_equal(one[0], other[0])


def test_bad_arguments_are_refused() -> None:
    native = video_native.module()
    assert native is not None
    out, found = np.empty((2, 4, 4, 3), np.uint8), np.zeros(2, np.uint8)
    with pytest.raises(ValueError, match="ascend"):
        native.decode_window(b"x", 0, np.array([5, 1]), (0, 0, 4, 4), False, 1, 2, out, found)
    with pytest.raises(ValueError, match=r"out must be uint8 \[len\(pts\), h, w, 3\]"):
        native.decode_window(b"x", 0, np.array([1, 5, 6]), (0, 0, 5, 4), False, 1, 2, out, found)
    with pytest.raises(TypeError, match="bytes-like"):
        native.decode_window(3, 0, np.array([1, 5]), (0, 0, 4, 4), False, 1, 2, out, found)
