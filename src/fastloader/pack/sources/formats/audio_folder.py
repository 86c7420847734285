"""Class folders of clips (Speech Commands style): audio + label."""

from __future__ import annotations

from pathlib import Path

from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source


class AudioFolder(Source):
    """pack/sources/audio_tree.py's importer."""

    name = "audiofolder"
    rank = 40

    def detect(self, probe: Probe) -> bool:
        from fastloader.pack.sources.audio_tree import is_clip_tree

        # class folders holding clips and no image (else it stays an ImageFolder tree)
        return probe.folder == "imagefolder" and is_clip_tree(probe.path)

    def open(self, src: str, opening: Opening) -> Opened:
        from fastloader.pack.sources.audio_tree import open_audio_tree
        from fastloader.pack.sources.formats.librispeech import refuse_as

        refuse_as(src, 'class folders of clips (source_format="audiofolder")')
        return open_audio_tree(src, opening.fields, opening.image, opening.label, opening.root)

    def files(self, path: str) -> list[Path]:
        return sorted(p for p in Path(path).rglob("*") if p.is_file())
