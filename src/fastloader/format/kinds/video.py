"""The video kind: a clip's container bytes per sample (MP4, MKV, WebM; H.264, HEVC, VP9, AV1 as
the bundled FFmpeg decodes them) stored as given, never re-encoded, with the facts that plan a
window in the field's meta column (size, frames, time base, duration, keyframes), so the loader
draws clips without opening a file. Checked at pack time by a whole decode (decode/video.py);
`packdata verify --decode` decodes each again. In a dataset without images the first video
field is the records (the shards)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastloader.decode import video
from fastloader.errors import DecodeError
from fastloader.format.kinds.base import Bad, BadValue, Kind, Spec, StoreContext, WithMeta

# per clip, int64: enough to plan a window by frame stride or by time without the file
META = ("width", "height", "frames", "time_base_num", "time_base_den", "duration_pts",
        "keyframes", "first_pts")


def meta_of(info: video.VideoInfo) -> tuple[int, ...]:
    """The meta row of a probed clip."""
    return (info.width, info.height, info.frames, info.time_base.numerator,
            info.time_base.denominator, info.duration_pts, len(info.keyframes),
            int(info.pts[0]))


class VideoKind(Kind):
    """Encoded video bytes (or a path to them), decoded once at pack time to prove them whole."""

    records = True  # the records of a dataset without images
    loaded_by = ("videos", "video=fastloader.Video(...)")
    meta = META
    verified = True  # with `packdata verify --decode`, each clip is decoded again
    cell_is_path = True

    def describe(self, spec: Spec) -> str:
        return "video (encoded clip)"

    def store(self, spec: Spec, value: Any, ctx: StoreContext) -> WithMeta:
        """The bytes as given, with META from the demuxed index and a whole decode."""
        if isinstance(value, WithMeta):  # a resumed pack's journal: checked already
            return value
        data = ctx.read(value)
        try:
            info = video.check(data)
        except DecodeError as exc:
            raise BadValue(str(exc)) from None
        return WithMeta(data, meta_of(info))

    def record_shape(self, spec: Spec, stored: Any) -> tuple[int, int]:
        width, height = stored.meta[0], stored.meta[1]
        return height, width

    def from_member(self, spec: Spec, member: Any, read: Callable[[Any], bytes],
                    deferred: bool) -> Any:
        return member if deferred else read(member)

    def from_cell(self, spec: Spec, value: Any, from_csv: bool) -> Any:
        """A clip path; a Hugging Face Video() cell ({"bytes", "path"}) gives its stored bytes
        (never decoded), else its path."""
        if isinstance(value, dict) and ("bytes" in value or "path" in value):
            data, path = value.get("bytes"), value.get("path")
            if data:
                return bytes(data)
            if isinstance(path, str) and path:
                return path
            raise ValueError("is a Video() cell with neither bytes nor a path")
        return super().from_cell(spec, value, from_csv)

    def check_column(self, spec: Spec, arrays: dict[str, np.ndarray]) -> str | None:
        meta = arrays.get("meta")
        if meta is not None and meta.size and int(meta[:, :5].min()) < 1:
            return "a clip's width, height, frames or time base in its meta column is below 1"
        return None

    def load(self, spec: Spec, blob: np.ndarray, shape: Any, fail: Bad) -> Any:
        return blob.tobytes()

    def verify(self, spec: Spec, value: Any, image_size: tuple[int, int],
               decode: Callable[[bytes], str | None] | None) -> str | None:
        """With decode (verify --decode), why the clip does not decode whole; the image
        decoder itself is not used."""
        if decode is None:
            return None
        try:
            video.check(bytes(value))
        except DecodeError as exc:
            return str(exc)
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

    empty = span.size == 0
    return {
        "clips": int(span.size),
        "hours": round(float(span.sum()) / 3600, 4),
        "frames": int(meta[:, 2].sum()),
        "seconds": {"min": 0.0, "median": 0.0, "mean": 0.0, "max": 0.0} if empty else {
            "min": round(float(span.min()), 3), "median": round(float(np.median(span)), 3),
            "mean": round(float(span.mean()), 3), "max": round(float(span.max()), 3)},
        "fps": histogram(fps.tolist()),
        "resolutions": histogram(sizes),
    }
