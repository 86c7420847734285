"""Video clips through PyAV: probe a container's frame index, check it, plan and decode a window."""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from fastloader.decode import video_native
from fastloader.decode.record import Record
from fastloader.errors import DecodeError, OptionalDependencyError, invalid_argument

EXTRA_FIX = "pip install 'fastloader[video]'"
# the file names read as video clips (class folders, table cells, WebDataset members, advice)
VIDEO_EXTENSIONS = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi")
THREAD_TYPES = tuple(video_native.THREAD_TYPE_CODES)  # "SLICE", "FRAME", "AUTO"


def _av() -> Any:
    """The av module; OptionalDependencyError naming the extra if it is missing."""
    try:
        import av
    except ImportError as exc:
        raise OptionalDependencyError(f"video fields need PyAV ({exc}); {EXTRA_FIX}") from None
    return av


@dataclass(frozen=True)
class VideoInfo:
    """What the index keeps of one clip: enough to plan a window without opening the file."""

    codec: str
    width: int
    height: int
    time_base: Fraction
    fps: float
    frames: int
    duration: float  # seconds, from the first frame's pts to the end of the last frame
    duration_pts: int
    pts: np.ndarray  # int64, every frame's pts in presentation order
    keyframes: np.ndarray | None  # int64, the keyframes' pts, ascending (None: not read; a
    # decode then seeks by the container's own index)

    def seconds(self, pts: Any) -> np.ndarray:
        """Timestamps in seconds of pts values."""
        return np.asarray(pts, np.int64) * float(self.time_base)


def _open(av: Any, data: Record, what: str) -> tuple[Any, Any]:
    """The container and its first video stream; DecodeError naming what is wrong."""
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except av.error.FFmpegError as exc:
        raise DecodeError(f"{what}: not a readable video container ({exc}); the file is damaged,"
                          " truncated or not a video: re-encode or drop it") from None
    if not container.streams.video:
        container.close()
        raise DecodeError(f"{what}: the container has no video stream; pack it as bytes or drop it")
    return container, container.streams.video[0]


def probe(data: Record, what: str = "video") -> VideoInfo:
    """The first video stream's frame index, by demuxing packets only (no decode)."""
    av = _av()
    container, stream = _open(av, data, what)
    pts: list[int] = []
    keys: list[int] = []
    last_duration = 0
    try:
        with container:
            for packet in container.demux(stream):
                if packet.pts is None:  # the demuxer's flush packet
                    continue
                pts.append(packet.pts)
                last_duration = packet.duration or 0
                if packet.is_keyframe:
                    keys.append(packet.pts)
            declared = stream.frames
            codec = stream.codec_context.name
            width, height = stream.codec_context.width, stream.codec_context.height
            time_base = Fraction(stream.time_base)
    except av.error.FFmpegError as exc:
        raise DecodeError(f"{what}: demuxing failed after {len(pts)} packets ({exc}); the file is"
                          " damaged or truncated: re-encode or drop it") from None
    if not pts:
        raise DecodeError(f"{what}: the video stream has no frames; drop the file")
    if declared and len(pts) < declared:
        raise DecodeError(f"{what}: the container declares {declared} frames but only {len(pts)}"
                          " can be read: the file is truncated; re-encode or drop it")
    order = np.sort(np.asarray(pts, np.int64))
    if len(np.unique(order)) != len(order):
        raise DecodeError(f"{what}: two frames share a timestamp; remux the file with fresh pts")
    span = int(order[-1] - order[0]) + int(last_duration)
    seconds = span * float(time_base)
    fps = (len(order) / seconds) if seconds > 0 else 0.0
    return VideoInfo(codec, width, height, time_base, fps, len(order), seconds, span, order,
                     np.sort(np.asarray(keys, np.int64)))


def frame_step(info: VideoInfo) -> int:
    """The pts step between frames when every step is the same (constant frame rate), else 0."""
    steps = np.diff(info.pts)
    return int(steps[0]) if len(steps) and (steps == steps[0]).all() else 0


def from_index(width: int, height: int, frames: int, time_base: Fraction, duration_pts: int,
               first_pts: int, step: int) -> VideoInfo:
    """A constant-frame-rate clip's VideoInfo from the facts a dataset's index keeps, without
    the file: every pts is first_pts + k * step; its keyframes are left to the container's own
    index (decode_clip seeks by it)."""
    pts = first_pts + step * np.arange(frames, dtype=np.int64)
    seconds = duration_pts * float(time_base)
    return VideoInfo("", width, height, time_base, frames / seconds if seconds > 0 else 0.0,
                     frames, seconds, duration_pts, pts, None)


def check(data: Record, what: str = "video") -> VideoInfo:
    """probe(), then decode every frame once (the pack-time check); DecodeError if any is bad,
    or if FFmpeg reports damage it worked around (a demuxer that resyncs past a broken
    cluster drops its frames without an error: their loss is said only in its log)."""
    with _damage_reports(_av()) as reports:
        info = probe(data, what)
        seen = _decode_pts(data, what)
    if reports:
        _, source, message = reports[0]
        raise DecodeError(f"{what}: FFmpeg's {source or 'reader'} reports damage ("
                          f"{message.strip()}); the file is damaged: re-encode or drop it")
    if not np.array_equal(seen, info.pts):
        missing = np.setdiff1d(info.pts, seen)
        raise DecodeError(f"{what}: {len(missing)} of {info.frames} frames do not decode (first"
                          f" missing pts {missing[:3].tolist()}); the file is damaged: re-encode"
                          " or drop it")
    return info


@contextlib.contextmanager
def _damage_reports(av: Any) -> Iterator[list[tuple[int, str, str]]]:
    """FFmpeg's error-level log lines of this thread while the block runs: (level, source,
    message). PyAV leaves FFmpeg's log off; it is raised to ERROR for the block alone."""
    before = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture(True) as captured:
            reports: list[tuple[int, str, str]] = []
            yield reports
            reports.extend(line for line in captured if line[0] <= av.logging.ERROR)
    finally:
        av.logging.set_level(before)


def _decode_pts(data: Record, what: str) -> np.ndarray:
    """The pts of every frame a full decode gives, sorted; DecodeError on a decoder error."""
    av = _av()
    container, stream = _open(av, data, what)
    seen: list[int] = []
    try:
        with container:
            for frame in container.decode(stream):
                seen.append(frame.pts)
    except av.error.FFmpegError as exc:
        raise DecodeError(f"{what}: decoding failed after {len(seen)} frames ({exc}); the file is"
                          " damaged: re-encode or drop it") from None
    return np.sort(np.asarray(seen, np.int64))


def plan_clip(info: VideoInfo, frames: int, stride: int | None = None, fps: float | None = None,
              start: float = 0.0) -> np.ndarray:
    """The pts of a window of `frames` frames: every `stride`-th frame, or the frame shown at
    each 1/fps step, from `start` seconds. Past the clip's end the last frame repeats, as
    PyTorchVideo's and SlowFast's samplers do (indices clamped), so every window has T frames."""
    if frames < 1:
        raise invalid_argument("frames", frames, "a window holds at least 1 frame",
                               "pass frames>=1")
    if (stride is None) == (fps is None):
        raise invalid_argument("stride", stride, "give exactly one of stride= and fps=",
                               "pass stride=2 (every 2nd frame) or fps=15.0 (by time)")
    seconds = info.seconds(info.pts)
    if stride is not None:
        if stride < 1:
            raise invalid_argument("stride", stride, "a stride is at least 1", "pass stride>=1")
        first = int(np.searchsorted(seconds, start - 1e-9, side="left"))
        index = first + stride * np.arange(frames)
    else:
        if fps is None or not fps > 0:
            raise invalid_argument("fps", fps, "frames per second must be > 0", "pass fps=15.0")
        times = start + np.arange(frames) / fps
        # the frame on screen at time t is the last one whose pts is at or before t
        index = np.searchsorted(seconds, times + 1e-9, side="right") - 1
    return info.pts[np.clip(index, 0, info.frames - 1)]


@dataclass(frozen=True)
class FrameView:
    """What each decoded frame of a window goes through: a crop (top, left, height, width) of
    the RGB frame (None: whole), a scale to size=(height, width) (None: kept), a flip."""

    crop: tuple[int, int, int, int] | None = None
    size: tuple[int, int] | None = None
    flip: bool = False


def decode_clip(data: Record, info: VideoInfo, pts: Any, out: np.ndarray | None = None,
                size: tuple[int, int] | None = None, threads: int = 1,
                thread_type: str = "SLICE", what: str = "video",
                view: FrameView | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Decode the frames whose pts are listed (repeats allowed) into uint8 [T, H, W, 3] RGB:
    seek to the keyframe at or before the first, decode forward to the last, scale in swscale
    to size=(height, width) if given (or crop, scale and flip each frame by view). Returns the
    frames and their timestamps in seconds."""
    wanted = np.asarray(pts, np.int64)
    if view is None:
        view = FrameView(size=size)
    size = view.size if view.size is not None else (
        (view.crop[2], view.crop[3]) if view.crop is not None else None)
    height, width = size if size is not None else (info.height, info.width)
    shape = (len(wanted), height, width, 3)
    if out is None:
        out = np.empty(shape, np.uint8)
    elif out.shape != shape or out.dtype != np.uint8:
        raise invalid_argument("out", f"{out.dtype}{list(out.shape)}",
                               f"it must be uint8{list(shape)}",
                               "pass an array of the window's shape or out=None")
    if thread_type not in THREAD_TYPES:
        raise invalid_argument("thread_type", thread_type, f"one of {THREAD_TYPES}", "pass 'SLICE'")
    order, row_of = np.unique(wanted, return_inverse=True)  # the distinct pts, each row's
    _decode_into(data, info, order.astype(np.int64, copy=False), row_of.reshape(-1), out,
                 view, threads, thread_type, what)
    return out, info.seconds(wanted)


_THREAD = threading.local()  # each thread's swscale context (one is not shared between threads)


def _cut(frame: Any, view: FrameView) -> np.ndarray:
    """One decoded frame as RGB24 [h, w, 3] (swscale's conversion), cut to view's crop.

    Through this thread's own reformatter: a frame's to_ndarray() builds a swscale context
    for every frame (0.16 against 0.095 ms a 340x256 frame here)."""
    reformatter = getattr(_THREAD, "reformatter", None)
    if reformatter is None:
        from av.video.reformatter import VideoReformatter

        reformatter = _THREAD.reformatter = VideoReformatter()
    rgb = reformatter.reformat(frame, format="rgb24").to_ndarray()
    if view.crop is None:
        return rgb
    top, left, height, width = view.crop
    return rgb[top:top + height, left:left + width]


def _finish(cuts: np.ndarray, view: FrameView) -> np.ndarray:
    """A window's cut frames [U, h, w, 3] scaled to view.size and flipped, in one call: torch's
    antialiased bilinear on the stacked window (within one level of Pillow's bilinear; the
    GIL released), after the RGB conversion, not in it (scaling 4:2:0 chroma planes on their
    own moves colour edges: MAE 3-4.5 against Pillow on saturated edges). The flip is torch's
    too: numpy's copy of a reversed pixel axis costs 8x more (0.87 against 0.10 ms a window of
    16 112x112 frames)."""
    scale = view.size is not None and view.size != cuts.shape[1:3]
    if not (scale or view.flip):
        return cuts
    import torch  # the load path only: packing never scales

    frames = torch.from_numpy(cuts)
    if scale:
        frames = torch.nn.functional.interpolate(
            frames.permute(0, 3, 1, 2), size=view.size, mode="bilinear", antialias=True,
            align_corners=False).permute(0, 2, 3, 1)
    if view.flip:
        frames = frames.flip(2)
    return frames.contiguous().numpy()


def _seek_target(info: VideoInfo, first: int) -> int:
    """Where to seek for a window starting at pts first: the keyframe at or before it, from the
    index (no guess by the demuxer); without the keyframes, first itself, and the container's
    index finds one (a B-frame GOP can make that one too late: the frames are then missing,
    and the caller probes the clip and retries)."""
    if info.keyframes is None:
        return first
    keys = info.keyframes[info.keyframes <= first]
    return int(keys[-1]) if len(keys) else int(info.pts[0])


def _decode_into(data: Record, info: VideoInfo, wanted: np.ndarray, row_of: np.ndarray,
                 out: np.ndarray, view: FrameView, threads: int, thread_type: str,
                 what: str) -> None:
    """Decode the wanted frames (their distinct pts, ascending), cut, scale and flip them
    (decode/video_native: in one native call with the GIL released, where fastloader._video is
    built; PyAV and torch otherwise), then copy them to out's rows (out[k] shows
    wanted[row_of[k]]); DecodeError naming what if one is missing."""
    seek_to = _seek_target(info, int(wanted[0]))
    crop = view.crop if view.crop is not None else (0, 0, info.height, info.width)
    native = video_native.decode_window(data, seek_to, wanted, crop, out.shape[1:3], view.flip,
                                        threads, thread_type, what)
    if native is not None:
        done, found = native
        left = set(wanted[~found].tolist())
    else:
        pts = set(wanted.tolist())
        decoded = _decode_pyav(data, pts, seek_to, view, threads, thread_type, what)
        left = pts - set(decoded)
    if left:
        raise DecodeError(f"{what}: {len(left)} wanted frames did not decode (pts"
                          f" {sorted(left)[:3]}); the file is damaged or the index is stale:"
                          " repack it")
    if native is None:
        done = _finish(np.stack([decoded[p] for p in wanted.tolist()]), view)
    # one whole-window copy (out may be a strided view of a batch in another layout: row by
    # row, numpy's transposing copy costs 5x more)
    out[...] = done if (row_of == np.arange(len(out))).all() else done[row_of]


def _decode_pyav(data: Record, slots: set[int], seek_to: int, view: FrameView, threads: int,
                 thread_type: str, what: str) -> dict[int, np.ndarray]:
    """Seek, decode forward through PyAV, cut each wanted frame: pts -> [h, w, 3].

    A packet whose frame is not wanted is decoded only if other frames reference it
    (skip_frame NONREF: a non-reference B-frame is dropped before it is decoded)."""
    av = _av()
    last = max(slots)
    container, stream = _open(av, data, what)
    context = stream.codec_context
    context.thread_count, context.thread_type = threads, thread_type
    cuts: dict[int, np.ndarray] = {}
    try:
        with container:
            container.seek(seek_to, stream=stream, backward=True, any_frame=False)
            for packet in container.demux(stream):
                wanted = packet.pts is None or packet.pts in slots  # None: the final flush
                context.skip_frame = "DEFAULT" if wanted else "NONREF"
                frames = [f for f in context.decode(packet) if f.pts is not None]
                cuts.update((f.pts, _cut(f, view)) for f in frames
                            if f.pts in slots and f.pts not in cuts)
                if len(cuts) == len(slots) or any(f.pts > last for f in frames):
                    break  # frames come out in presentation order: none wanted is left
    except av.error.FFmpegError as exc:
        raise DecodeError(f"{what}: decoding failed near pts {seek_to}..{last} ({exc}); the file"
                          " is damaged: re-encode or drop it") from None
    return cuts
