"""VideoLoader: batches of a packed video dataset (FastLoader(path, video=fastloader.Video())):
the clip loader (loader/clips/loader.py) with the video decoder (loader/clips/video_batch.py). Each
batch's video is the pair (frames [B, T, C, H, W], timestamps float32 [B, T]) where the
records' image would be."""

from __future__ import annotations

import numpy as np

from fastloader.format.kinds.video import VideoKind
from fastloader.loader.clips.decoding import ClipDecoder
from fastloader.loader.clips.loader import ClipLoader
from fastloader.loader.clips.video_batch import VideoDecoder
from fastloader.loader.factory.options import ClipOptions
from fastloader.loader.factory.video_options import VideoOptions


class VideoLoader(ClipLoader, path="video loader"):
    """FastLoader's video loader: see FastLoader and fastloader.Video; docs/video.md.

    It takes ClipLoader's arguments (num_threads: one FFmpeg decoder each), and these:

    Args:
        video: the window and output settings, a fastloader.Video.
        transforms: RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip: one crop
            and flip a video, applied to every frame of its windows; they must end in one
            size (None: frames as stored, every video of one size).
    """

    kind_class = VideoKind
    kind_words = "videos"

    def _decoder_for(self, options: ClipOptions, meta: np.ndarray) -> ClipDecoder:
        assert isinstance(options, VideoOptions)  # its path's options class builds it
        self.video = options.spec
        return VideoDecoder(self._data.record, meta, options.spec, options.decode_transforms,
                            options.threads)
