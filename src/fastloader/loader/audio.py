"""AudioLoader: batches of a packed audio dataset (FastLoader(path, audio=fastloader.Audio())):
the clip producer (loader/clips.py) with the audio decoder (loader/audio_batch.py). Each
batch's audio is the pair (waveforms [B, C, T], lengths int64 [B]) where the records' image
would be."""

from __future__ import annotations

import numpy as np

from fastloader.format.kinds.audio import AudioKind
from fastloader.loader.audio_batch import BatchDecoder
from fastloader.loader.clips import ClipDecoder, ClipLoader
from fastloader.loader.options import AudioOptions, ClipOptions


class AudioLoader(ClipLoader, path="audio loader"):
    """FastLoader's audio loader: see FastLoader and fastloader.Audio; docs/audio.md.

    Args:
        data: a packed dataset of clips (its records an audio field), path or PackedDataset.
        batch_size: clips per batch (without max_batch_seconds).
        shuffle: a new order each epoch, drawn from (seed, epoch).
        seed: the seed of the order, the duration plan's batch order and the random crops.
        device: "cuda", "cuda:k" or "cpu"; default this process's CUDA device if any.
        num_threads: decode threads ("auto"/None: the cores this rank may use).
        prefetch: batches decoded ahead.
        drop_last: drop the last short batch, and the batches that would make ranks uneven.
        rank: this process's rank (default from torch.distributed).
        world_size: the number of ranks (default likewise).
        on_error: "raise" or "skip" (a clip that does not decode is replaced by the next).
        verify_records: check each clip's crc32 as it is read.
        fields: the field names each batch holds, as a tuple in that order (see FastLoader).
        audio: the output settings, a fastloader.Audio.
        max_batch_seconds: batch by duration: each batch's padded seconds (count x its
            longest clip, after the crop) stay within this; None: batch_size clips a batch.
        duration_buckets: the duration plan's buckets by clip length.

    Raises:
        InvalidArgumentError: an argument is out of range, or the dataset holds no clips.
        DecodeError: while iterating, a clip does not decode (on_error="raise").
    """

    options_class = AudioOptions
    kind_class = AudioKind
    kind_words = "audio clips"
    _path = "audio loader"

    def _decoder_for(self, options: ClipOptions, meta: np.ndarray) -> ClipDecoder:
        assert isinstance(options, AudioOptions)  # options_class builds it
        self.audio = options.spec
        return BatchDecoder(self._data.record, meta, options.spec, options.threads)
