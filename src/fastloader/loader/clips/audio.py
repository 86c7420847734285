"""AudioLoader: batches of a packed audio dataset (FastLoader(path, audio=fastloader.Audio())):
the clip loader (loader/clips/loader.py) with the audio decoder (loader/clips/audio_batch.py). Each
batch's audio is the pair (waveforms [B, C, T], lengths int64 [B]) where the records' image
would be."""

from __future__ import annotations

import numpy as np

from fastloader.format.kinds.audio import AudioKind
from fastloader.loader.clips.audio_batch import BatchDecoder
from fastloader.loader.clips.decoding import ClipDecoder
from fastloader.loader.clips.loader import ClipLoader
from fastloader.loader.factory.audio_options import AudioOptions
from fastloader.loader.factory.options import ClipOptions


class AudioLoader(ClipLoader, path="audio loader"):
    """FastLoader's audio loader: see FastLoader and fastloader.Audio; docs/audio.md.

    It takes ClipLoader's arguments (batch_size: the clips a batch without
    max_batch_seconds), and these:

    Args:
        audio: the output settings, a fastloader.Audio.
        max_batch_seconds: batch by duration: each batch's padded seconds (count x its
            longest clip, after the crop) stay within this; None: batch_size clips a batch.
        duration_buckets: the duration plan's buckets by clip length.
    """

    kind_class = AudioKind
    kind_words = "audio clips"

    def _decoder_for(self, options: ClipOptions, meta: np.ndarray) -> ClipDecoder:
        assert isinstance(options, AudioOptions)  # its path's options class builds it
        self.audio = options.spec
        return BatchDecoder(self._data.record, meta, options.spec, options.threads)
