"""fastloader.Video: how the video loader draws windows of frames from stored clips and lays them
out in a batch, and the video loader's options (VideoOptions, and VideoArgs for FastLoader's
typed overload); checked before anything is opened."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastloader.checks import flag, positive_int
from fastloader.decode.augment import check_transforms, refuse_detection
from fastloader.errors import invalid_argument, invalid_type
from fastloader.loader.factory.keywords import ClipArgs
from fastloader.loader.factory.options import ClipOptions, Transforms
from fastloader.loader.factory.view_options import refuse_pixel_ops

LAYOUTS = ("TCHW", "CTHW", "THWC")
DTYPES = ("uint8", "float32")


@dataclass(frozen=True)
class Video:
    """How the video loader turns each stored clip into its batch entry.

    A batch's clips come as the pair `(frames, timestamps)`: frames uint8 (or float32 in
    [0, 1]) `[B, T, C, H, W]` (layout="TCHW"; "CTHW" gives `[B, C, T, H, W]`, "THWC"
    `[B, T, H, W, C]`), RGB; timestamps float32 `[B, T]`, each frame's presentation time in
    seconds from the start of its file. With clips=N > 1 each is `[B, N, ...]`. A window is
    T=frames frames, every `stride`-th one, or one each 1/fps seconds by timestamp (right on
    variable frame rate). Past a clip's end its last frame repeats. Windows and crops are
    drawn from (seed, epoch, sample): the same whatever the batch, rank or thread count.

    Args:
        frames: frames per window (T).
        stride: take every stride-th frame (default 1 when fps is None).
        fps: take the frame shown at each 1/fps step instead (by timestamp).
        clips: windows per video; with N > 1 they are spread evenly over it.
        random: a window's start drawn uniformly (training); False: the centre window.
        layout: "TCHW" (default), "CTHW" (PyTorchVideo, 3D CNNs) or "THWC".
        dtype: "uint8" (default) or "float32" (0-1).
        decoder_threads: FFmpeg threads inside each of the loader's num_threads decoders (1:
            the loader's threads are the parallelism; more oversubscribes the cores).

    Raises:
        InvalidArgumentError: a value is out of range.
        InvalidTypeError: a value has the wrong type.
    """

    frames: int = 16
    stride: int | None = None
    fps: float | None = None
    clips: int = 1
    random: bool = True
    layout: str = "TCHW"
    dtype: str = "uint8"
    decoder_threads: int = 1

    def __post_init__(self) -> None:
        positive_int("Video(frames=)", self.frames)
        positive_int("Video(clips=)", self.clips)
        positive_int("Video(decoder_threads=)", self.decoder_threads)
        flag("Video(random=)", self.random)
        if self.stride is not None and self.fps is not None:
            raise invalid_argument("Video(stride=)", self.stride, "give stride= or fps=, not both",
                                   "Pass stride=2 (every 2nd frame) or fps=8.0 (by time).")
        if self.stride is not None:
            positive_int("Video(stride=)", self.stride)
        if self.fps is not None:
            if isinstance(self.fps, bool) or not isinstance(self.fps, (int, float)):
                raise invalid_type("Video(fps=)", self.fps, "a number of frames per second")
            if not math.isfinite(self.fps) or self.fps <= 0:
                raise invalid_argument("Video(fps=)", self.fps, "must be a finite rate > 0",
                                       "Pass e.g. fps=8.0.")
        if self.layout not in LAYOUTS:
            raise invalid_argument("Video(layout=)", self.layout, f"must be one of {LAYOUTS}",
                                   "Pass layout='TCHW' for [B, T, C, H, W].")
        if self.dtype not in DTYPES:
            raise invalid_argument("Video(dtype=)", self.dtype, f"must be one of {DTYPES}",
                                   "Pass dtype='float32' for 0-1 floats.")

    @property
    def step(self) -> int:
        """The frame stride (1 when neither stride nor fps is given)."""
        return self.stride or 1


def check_video(video: object) -> Video | None:
    """video if it is a Video (or None); InvalidTypeError otherwise."""
    if video is None or isinstance(video, Video):
        return video
    raise invalid_type("video", video, "a fastloader.Video(...)")


@dataclass
class VideoOptions(ClipOptions):
    """The video loader's options (FastLoader(..., video=fastloader.Video(...)), a packed
    dataset of videos): `video`, and the transforms, one crop and flip a clip."""

    video: Video | None = None
    transforms: Transforms = None

    def _check_own(self) -> None:
        self.spec = check_video(self.video) or Video()
        refuse_pixel_ops(self.transforms, "the video loader", "Drop it: the video loader "
                         "takes RandomResizedCrop, Resize, CenterCrop and RandomHorizontalFlip.")
        self.decode_transforms = check_transforms(self.transforms)
        refuse_detection(self.decode_transforms, "the video loader",
                         "Use RandomResizedCrop, Resize, CenterCrop and RandomHorizontalFlip.")


class VideoArgs(ClipArgs, total=False):
    """The video loader's keywords besides video= (VideoOptions), for FastLoader's overload."""

    transforms: Transforms
