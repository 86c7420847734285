"""Class folders of clips (Speech Commands style): audio + label."""

from __future__ import annotations

from fastloader.pack.sources.media_tree import AUDIO, MediaFolder


class AudioFolder(MediaFolder):
    """pack/sources/media_tree.py's importer, for audio clips."""

    name = "audiofolder"
    rank = 40
    medium = AUDIO
