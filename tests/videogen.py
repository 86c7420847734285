"""Synthetic video clips for tests: PyAV encodes a moving scene at chosen codecs, sizes, pts.

PyAV is imported on use: it is a test dependency (the `video` extra), absent where the wheel
is checked, and the modules using this one skip there."""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np


def scene(index: int, height: int, width: int) -> np.ndarray:
    """An RGB frame whose content moves with index: a gradient plus a bright square that slides."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 4 + index * 7) % 256, (y * 5 + index * 3) % 256,
                    np.full_like(x, (index * 29) % 256)], axis=-1).astype(np.uint8)
    side = max(4, min(height, width) // 4)
    top, left = (index * 3) % (height - side), (index * 5) % (width - side)
    rgb[top:top + side, left:left + side] = 255
    return rgb


def make_clip(codec: str = "libx264", frames: int = 24, width: int = 64, height: int = 48,
              rate: int = 8, pts: list[int] | None = None, gop: int = 6,
              faststart_path: str | None = None) -> bytes:
    """Encoded clip bytes: MP4 for H.264, WebM for VP9. pts (in 1/(rate*10) units) gives a
    variable frame rate; yuv444p for H.264 at odd sizes, since 4:2:0 needs even ones there.
    faststart_path: write an MP4 with its index before the frames there (the muxer rewrites
    the file on close, so it needs a real file), and return its bytes."""
    import av

    container_format = "webm" if "vp9" in codec else "mp4"
    odd = width % 2 or height % 2
    pix_fmt = "yuv444p" if odd and codec == "libx264" else "yuv420p"
    buffer = io.BytesIO()
    options = {"movflags": "faststart"} if faststart_path else {}
    target = faststart_path or buffer
    with av.open(target, mode="w", format=container_format, options=options) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.codec_context.time_base = Fraction(1, rate * 10)
        stream.codec_context.gop_size = gop
        if codec == "libx264":
            stream.options = {"bf": "2", "preset": "ultrafast", "crf": "20"}
        else:
            stream.options = {"deadline": "realtime", "cpu-used": "8"}
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(scene(index, height, width), format="rgb24")
            frame.pts = pts[index] if pts is not None else index * 10
            frame.time_base = Fraction(1, rate * 10)
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    if faststart_path:
        with open(faststart_path, "rb") as file:
            return file.read()
    return buffer.getvalue()


def reference(data: bytes) -> dict[int, np.ndarray]:
    """Every frame of a plain decode from the start, by pts, as RGB24."""
    import av

    with av.open(io.BytesIO(data)) as container:
        return {frame.pts: frame.to_ndarray(format="rgb24")
                for frame in container.decode(video=0)}


def keyframes(data: bytes) -> list[int]:
    """The pts of the frames a full decode marks as keyframes, ascending."""
    import av

    with av.open(io.BytesIO(data)) as container:
        return sorted(frame.pts for frame in container.decode(video=0) if frame.key_frame)
