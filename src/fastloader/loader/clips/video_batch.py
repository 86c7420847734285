"""One video batch: each clip's windows and crop planned from the index (no file opened), then
decoded with a seek to the keyframe before each window, cropped, scaled and flipped on the
loader's threads, straight into the batch buffer.

The windows and the crop of sample i in epoch e are drawn from numpy's PCG64 seeded by
(seed, e, i): they do not depend on the batch, the rank or the thread count, and a replacement
under on_error="skip" is planned the same way for its own index. Each of the loader's threads
runs one FFmpeg decoder with Video.decoder_threads threads (1 by default), so the threads in
use are the loader's num_threads, never num_threads x the cores (PyAV releases the GIL while
FFmpeg decodes and scales).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import numpy as np
import torch

from fastloader.decode import video as clips
from fastloader.decode import video_native
from fastloader.decode.augment import Transform, output_size, plan_geometry
from fastloader.errors import DecodeError
from fastloader.format.kinds.video import seconds
from fastloader.loader.clips.decoding import Failure, decode_rows, replace_failed
from fastloader.loader.factory.video_options import Video

# each layout's axes of a batch [B, clips, T, H, W, 3] (as FFmpeg gives RGB): the buffer is laid
# out so, and each frame is written through a [T, H, W, 3] view of it, on the decode threads
_PERMUTE = {"TCHW": (0, 1, 2, 5, 3, 4), "CTHW": (0, 1, 5, 2, 3, 4), "THWC": (0, 1, 2, 3, 4, 5)}


def plan_starts(meta: np.ndarray, video: Video, rng: np.random.Generator) -> np.ndarray:
    """One clip's window starts, float64 [clips]: frame numbers (by stride) or seconds from
    its first frame (by fps), planned from its meta row alone."""
    frames, span = int(meta[2]), float(seconds(meta)[0])
    if video.fps is None:  # frame numbers: the window covers (T - 1) * stride + 1 frames
        room = max(0.0, float(frames - ((video.frames - 1) * video.step + 1)))
    else:
        room = max(0.0, span - video.frames / video.fps)
    if video.random:
        starts = rng.uniform(0.0, room, video.clips) if video.fps is not None else \
            rng.integers(0, int(room) + 1, video.clips).astype(np.float64)
    elif video.clips == 1:
        starts = np.array([room / 2])
    else:
        starts = np.linspace(0.0, room, video.clips)
    return starts if video.fps is not None else np.floor(starts)


def window_pts(info: clips.VideoInfo, start: float, video: Video) -> np.ndarray:
    """The pts of one window from its planned start (the last frame repeats past the end)."""
    if video.fps is None:
        index = int(start) + video.step * np.arange(video.frames)
        return info.pts[np.clip(index, 0, info.frames - 1)]
    first = float(info.seconds(info.pts[:1])[0])
    return clips.plan_clip(info, video.frames, fps=video.fps, start=first + start)


class VideoDecoder:
    """Decodes a batch's clips on `threads` threads: the clip loader's ClipDecoder for video.
    Its buffer is uint8 [B, clips, ...] in the layout Video asks ([T, C, H, W], [C, T, H, W]
    or [T, H, W, C]), each frame written into it through a [T, H, W, 3] view by the thread
    that decoded it (so no thread permutes the whole batch after); its facts per clip are the
    frames' timestamps, float32 [B, clips, T].

    Args:
        read: sample index -> its stored bytes (a zero-copy view of the shard).
        meta: the clips' (N, len(kinds.video.META)) meta.
        video: the window and output settings.
        transforms: the checked transforms (one crop and flip a clip).
        threads: decode threads.
    """

    kind = "video"
    dtype = np.dtype(np.uint8)

    def __init__(self, read: Callable[[int], memoryview], meta: np.ndarray, video: Video,
                 transforms: Sequence[Transform], threads: int) -> None:
        self.read, self.meta, self.video = read, meta, video
        self.transforms, self.threads = tuple(transforms), threads
        self.backend = "native" if video_native.module() is not None else "pyav"
        layout = _PERMUTE[video.layout][1:]
        self._rows_view = tuple(int(a) for a in np.argsort([axis - 1 for axis in layout]))
        shapes = meta[:, [1, 0]].astype(np.int64)  # (height, width)
        self.size = output_size(self.transforms, shapes) if len(shapes) else (1, 1)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fastloader-video")

    def durations(self) -> np.ndarray:
        return seconds(self.meta)

    def shape(self, indices: np.ndarray) -> tuple[int, ...]:
        frames = (len(indices), self.video.clips, self.video.frames, *self.size, 3)
        return tuple(frames[axis] for axis in _PERMUTE[self.video.layout])

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def after_fork(self) -> None:
        """In a forked child: the parent's pool threads are not there; start a new pool."""
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fastloader-video")

    def view(self, index: int, rng: np.random.Generator) -> clips.FrameView:
        """Sample index's crop, scale and flip, the same for every frame of its windows."""
        height, width = int(self.meta[index, 1]), int(self.meta[index, 0])
        geometry = plan_geometry(self.transforms, np.array([[height, width]]), rng)
        top, left, crop_h, crop_w = (int(v) for v in geometry.crops[0])
        return clips.FrameView((top, left, crop_h, crop_w), self.size, bool(geometry.flips[0]))

    def clip(self, index: int, seed: int, epoch: int, out: np.ndarray) -> np.ndarray:
        """Sample index's windows decoded into out [clips, T, H, W, 3]; their timestamps.

        A constant-frame-rate clip's frames are addressed from its index row, and the seek
        left to the container's index; a variable-rate one (or one whose seek lands after a
        window's first frame) is demuxed for its frame index first."""
        rng = np.random.Generator(np.random.PCG64([seed, epoch, index]))
        starts = plan_starts(self.meta[index], self.video, rng)
        view = self.view(index, rng)
        data = self.read(index)  # a view of the shard: the container reader copies it once
        what = f"video of sample {index}"
        indexed = self._indexed(index)
        if indexed is not None:
            try:
                return self._windows(data, indexed, starts, view, out, what)
            except DecodeError:
                pass  # a damaged clip fails again below, with the probe's own words
        return self._windows(data, clips.probe(data, what), starts, view, out, what)

    def _indexed(self, index: int) -> clips.VideoInfo | None:
        """The clip's VideoInfo from its meta row when its frame rate is constant, else None."""
        width, height, frames, num, den, span, _, first, step = (
            int(v) for v in self.meta[index])
        if step <= 0:
            return None
        return clips.from_index(width, height, frames, Fraction(num, den), span, first, step)

    def _windows(self, data: memoryview, info: clips.VideoInfo, starts: np.ndarray,
                 view: clips.FrameView, out: np.ndarray, what: str) -> np.ndarray:
        """Each window decoded into its row of out; their timestamps [clips, T]."""
        times = np.empty((self.video.clips, self.video.frames), np.float32)
        for k, start in enumerate(starts.tolist()):
            _, times[k] = clips.decode_clip(data, info, window_pts(info, start, self.video),
                                            out[k], threads=self.video.decoder_threads,
                                            what=what, view=view)
        return times

    def decode_into(self, indices: np.ndarray, seed: int, epoch: int, out: np.ndarray
                    ) -> tuple[np.ndarray, list[Failure]]:
        """Every video of the batch into out: (timestamps [B, clips, T], failures)."""
        times, failures = decode_rows(
            self._pool, self.threads, indices,
            lambda row, sample: self.clip(sample, seed, epoch, self._frames(out[row])))
        empty = np.zeros((self.video.clips, self.video.frames), np.float32)
        return np.stack([empty if t is None else t for t in times]), failures

    def replace(self, failure: Failure, seed: int, epoch: int, out: np.ndarray
                ) -> tuple[int, np.ndarray]:
        """on_error="skip": the next video that decodes in the failed one's row; (its index,
        its timestamps)."""
        return replace_failed(failure, len(self.meta),
                              lambda sample: self.clip(sample, seed, epoch,
                                                       self._frames(out[failure.row])))

    def _frames(self, row: np.ndarray) -> np.ndarray:
        """A batch row of the buffer as [clips, T, H, W, 3] (a view in the buffer's layout)."""
        return row.transpose(self._rows_view)

    def trimmed(self, out: np.ndarray, facts: np.ndarray) -> np.ndarray:
        return out  # every window has T frames of one size

    def finish(self, frames: torch.Tensor, facts: torch.Tensor, from_ring: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(frames in the asked layout and dtype, timestamps), [B, ...] or with clips > 1
        [B, clips, ...]."""
        if self.video.dtype == "float32":
            frames = frames.to(torch.float32).div_(255.0)
        if self.video.clips == 1:
            return frames[:, 0], facts[:, 0]
        return frames, facts
