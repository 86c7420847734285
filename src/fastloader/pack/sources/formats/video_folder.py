"""Class folders of videos (Kinetics, UCF101 style: ROOT/<class>/<clip>.mp4): video + label."""

from __future__ import annotations

from fastloader.decode.video import VIDEO_EXTENSIONS
from fastloader.pack.sources.media_tree import MediaFolder, Medium


class VideoFolder(MediaFolder):
    """pack/sources/media_tree.py's importer, for video clips."""

    name = "videofolder"
    rank = 41
    medium = Medium("video", "videofolder", VIDEO_EXTENSIONS, "videos")
