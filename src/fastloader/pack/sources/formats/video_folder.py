"""Class folders of videos (Kinetics, UCF101 style: ROOT/<class>/<clip>.mp4): video + label."""

from __future__ import annotations

from fastloader.pack.sources.media_tree import VIDEO, MediaFolder


class VideoFolder(MediaFolder):
    """pack/sources/media_tree.py's importer, for video clips."""

    name = "videofolder"
    rank = 41
    medium = VIDEO
