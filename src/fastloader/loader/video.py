"""VideoLoader: batches of a packed video dataset (FastLoader(path, video=fastloader.Video())):
the clip producer (loader/clips.py) with the video decoder (loader/video_batch.py). Each
batch's video is the pair (frames [B, T, C, H, W], timestamps float32 [B, T]) where the
records' image would be."""

from __future__ import annotations

import numpy as np

from fastloader.format.kinds.video import VideoKind
from fastloader.loader.clips import ClipDecoder, ClipLoader
from fastloader.loader.options import ClipOptions, VideoOptions
from fastloader.loader.video_batch import VideoDecoder


class VideoLoader(ClipLoader, path="video loader"):
    """FastLoader's video loader: see FastLoader and fastloader.Video; docs/video.md.

    Args:
        data: a packed dataset of videos (its records a video field), path or PackedDataset.
        batch_size: videos per batch.
        shuffle: a new order each epoch, drawn from (seed, epoch).
        seed: the seed of the order, the windows and the crops.
        device: "cuda", "cuda:k" or "cpu"; default this process's CUDA device if any.
        num_threads: decode threads, one FFmpeg decoder each ("auto"/None: the cores this
            rank may use).
        prefetch: batches decoded ahead.
        drop_last: drop the last short batch, and the batches that would make ranks uneven.
        rank: this process's rank (default from torch.distributed).
        world_size: the number of ranks (default likewise).
        on_error: "raise" or "skip" (a video that does not decode is replaced by the next).
        verify_records: check each video's crc32 as it is read.
        fields: the field names each batch holds, as a tuple in that order (see FastLoader).
        video: the window and output settings, a fastloader.Video.
        transforms: RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip: one crop
            and flip a video, applied to every frame of its windows; they must end in one
            size (None: frames as stored, every video of one size).

    Raises:
        InvalidArgumentError: an argument is out of range, or the dataset holds no videos.
        DecodeError: while iterating, a video does not decode (on_error="raise").
    """

    options_class = VideoOptions
    kind_class = VideoKind
    kind_words = "videos"
    _path = "video loader"

    def _decoder_for(self, options: ClipOptions, meta: np.ndarray) -> ClipDecoder:
        assert isinstance(options, VideoOptions)  # options_class builds it
        self.video = options.spec
        return VideoDecoder(self._data.record, meta, options.spec, options.decode_transforms,
                            options.threads)
