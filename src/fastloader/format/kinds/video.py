"""The video kind: a clip's container bytes per sample (MP4, MKV, WebM; H.264, HEVC, VP9, AV1 as
the bundled FFmpeg decodes them) stored as given, never re-encoded, with the facts that plan a
window in the field's meta column (size, frames, time base, duration, keyframes), so the loader
draws clips without opening a file. Checked at pack time by a whole decode (decode/video.py);
`packdata verify --decode` decodes each again. In a dataset without images the first video
field is the records (the shards)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastloader.decode import video
from fastloader.errors import DecodeError
from fastloader.format.kinds.base import Spec
from fastloader.format.kinds.encoded import EncodedKind, seconds_line, spread

# per clip, int64: enough to plan a window by frame stride or by time without the file
# (frame_step: the pts step of a constant-frame-rate clip, whose frames the loader then
# addresses without demuxing it; 0: variable)
META = ("width", "height", "frames", "time_base_num", "time_base_den", "duration_pts",
        "keyframes", "first_pts", "frame_step")


def meta_of(info: video.VideoInfo) -> tuple[int, ...]:
    """The meta row of a probed clip."""
    keyframes = 0 if info.keyframes is None else len(info.keyframes)
    return (info.width, info.height, info.frames, info.time_base.numerator,
            info.time_base.denominator, info.duration_pts, keyframes, int(info.pts[0]),
            video.frame_step(info))


class VideoKind(EncodedKind):
    """Encoded video bytes (or a path to them), decoded once at pack time to prove them whole."""

    loaded_by = ("videos", "video=fastloader.Video(...)")
    meta = META
    feature = "Video"
    extensions = video.VIDEO_EXTENSIONS
    columns = ("video", "video_path", "video_filepath")

    def describe(self, spec: Spec) -> str:
        return "video (encoded clip)"

    def facts(self, data: bytes) -> tuple[int, ...]:
        """META from the demuxed index, proven by a whole decode; DecodeError saying why not
        (without decode/video's own "video: " lead: the refusal already names the field)."""
        try:
            return meta_of(video.check(data))
        except DecodeError as exc:
            raise DecodeError(str(exc).removeprefix("video: ")) from None

    def record_shape(self, spec: Spec, stored: Any) -> tuple[int, int]:
        width, height = stored.meta[0], stored.meta[1]
        return height, width

    codecs_read = 256  # naming a clip's codec demuxes it: fewer than audio's header sniffs

    def summary(self, meta: np.ndarray) -> dict[str, Any]:
        return summary(meta)

    def summary_lines(self, clips: dict[str, Any]) -> list[str]:
        fps = ", ".join(f"{float(k):g} fps {n}" for k, n in clips["fps"].items())
        sizes = ", ".join(f"{k} {n}" for k, n in clips["resolutions"].items())
        return [f"video     {clips['clips']} clips, {clips['hours']:.2f} hours, "
                f"{clips['frames']} frames",
                seconds_line(clips["seconds"]),
                f"fps       {fps}",
                f"sizes     {sizes}"]

    def codec(self, record: bytes | memoryview) -> str:
        """The video stream's codec as FFmpeg names it (h264, vp9 ...), from its demuxed index;
        "unreadable" for a clip that no longer demuxes (verify --decode says why)."""
        try:
            return video.probe(record).codec
        except DecodeError:
            return "unreadable"

    def check_column(self, spec: Spec, arrays: dict[str, np.ndarray]) -> str | None:
        meta = arrays.get("meta")
        if meta is not None and meta.size and int(meta[:, :5].min()) < 1:
            return "a clip's width, height, frames or time base in its meta column is below 1"
        return None


def seconds(meta: np.ndarray) -> np.ndarray:
    """Each clip's duration in seconds from its (N, len(META)) meta."""
    meta = np.asarray(meta, np.int64).reshape(-1, len(META))
    return meta[:, 5] * meta[:, 3] / np.maximum(meta[:, 4], 1)


def summary(meta: np.ndarray) -> dict[str, Any]:
    """`packdata info`'s account of a video field from its meta: clips, total hours, seconds
    per clip (min, median, mean, max), and histograms of frame rates and resolutions."""
    meta = np.asarray(meta, np.int64).reshape(-1, len(META))
    span = seconds(meta)
    fps = np.round(meta[:, 2] / np.maximum(span, 1e-9), 2)
    sizes = [f"{w}x{h}" for w, h in zip(meta[:, 0].tolist(), meta[:, 1].tolist(), strict=True)]

    def histogram(values: list[Any]) -> dict[str, int]:
        keys, counts = np.unique(np.asarray(values), return_counts=True)
        pairs = sorted(zip(keys.tolist(), counts.tolist(), strict=True), key=lambda p: -p[1])
        return {str(k): int(n) for k, n in pairs}

    return {
        "clips": int(span.size),
        "hours": round(float(span.sum()) / 3600, 4),
        "frames": int(meta[:, 2].sum()),
        "seconds": spread(span),
        "fps": histogram(fps.tolist()),
        "resolutions": histogram(sizes),
    }
