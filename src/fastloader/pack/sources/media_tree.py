"""A folder of class sub-folders of media files (Speech Commands' audio clips, Kinetics' or
UCF101's videos) as Python-style samples: each file's path as the medium's field (`audio`,
`video`) and its folder's index as a `label` int with the folders' names as classes; packed
like any importer's samples (the files stored as given)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fastloader.decode.audio import AUDIO_EXTENSIONS
from fastloader.decode.pillow import IMAGE_EXTENSIONS
from fastloader.decode.video import VIDEO_EXTENSIONS
from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source
from fastloader.pack.sources.types import Description, FieldKinds, Sample
from fastloader.pack.sources.values import PATH_KEY, WHERE_KEY


@dataclass(frozen=True)
class Medium:
    """One kind of class-folder tree: its field (a kind's name), source name, file
    extensions and the word for its files."""

    field: str  # "audio", "video": the field kind the files are stored as
    source: str  # "audiofolder", "videofolder": its source_format
    extensions: tuple[str, ...]
    files: str  # "clips", "videos"


AUDIO = Medium("audio", "audiofolder", AUDIO_EXTENSIONS, "audio clips")
VIDEO = Medium("video", "videofolder", VIDEO_EXTENSIONS, "videos")
MEDIA = (AUDIO, VIDEO)


def is_media_tree(folder: Path, medium: Medium, limit: int = 2000) -> bool:
    """Whether the folder's first `limit` files hold the medium's files and no images (a tree
    of images stays an ImageFolder); PackError naming both when it holds another medium's
    files too (audio beside video: either reading drops the other's files, so say which)."""
    seen: dict[Medium, str] = {}
    for count, file in enumerate(p for p in folder.rglob("*") if p.is_file()):
        if count >= limit:
            break
        suffix = file.suffix.lower()
        if suffix in IMAGE_EXTENSIONS:
            return False
        found = next((m for m in MEDIA if suffix in m.extensions), None)
        if found is not None:
            seen.setdefault(found, file.relative_to(folder).as_posix())
    if medium in seen and len(seen) > 1:
        both = [m for m in MEDIA if m in seen]
        raise PackError(f"{folder} holds class folders of both " + " and ".join(
            f"{m.files} (such as {seen[m]})" for m in both) + "; a packed dataset's records "
            "are one kind: say which with " + " or ".join(
            f'source_format="{m.source}"' for m in both) + " (the other files are ignored).")
    return medium in seen


def open_media_tree(src: str | os.PathLike[str], medium: Medium, fields: FieldKinds | None,
                    image: str | None, label: str | None,
                    root: str | os.PathLike[str] | None
                    ) -> tuple[list[Sample], list[FieldSpec], Description]:
    """(samples, fields, source description) of a folder of class sub-folders of the
    medium's files."""
    if fields or image or label or root:
        raise PackError(f"fields=, image=, label= and root= are table options; a folder of "
                        f"class folders of {medium.files} has the fields {medium.field} and "
                        "label.")
    top = Path(src).expanduser().absolute()
    loose = sorted(p.name for p in top.iterdir()
                   if p.is_file() and p.suffix.lower() in medium.extensions)
    if loose:
        raise PackError(f"{top}: {loose[0]!r} is not in a class folder; a folder of "
                        f"{medium.files} holds one sub-folder per class (move it into one, or "
                        "pack a table).")
    classes = sorted(p.name for p in top.iterdir() if p.is_dir())
    samples = []
    for label_id, name in enumerate(classes):
        for path in sorted((top / name).rglob("*")):
            if path.is_file() and path.suffix.lower() in medium.extensions:
                relative = path.relative_to(top).as_posix()
                samples.append({WHERE_KEY: relative, PATH_KEY: relative,
                                medium.field: str(path), "label": label_id})
    if not samples:
        raise PackError(f"{top}: no {medium.files} ({', '.join(medium.extensions)}) in its "
                        "class folders.")
    specs = [FieldSpec(medium.field, medium.field),
             FieldSpec("label", "int", classes=tuple(classes))]
    return samples, specs, {"kind": medium.source, "path": str(top)}


class MediaFolder(Source):
    """The source of one medium's class-folder trees (formats/audio_folder.py,
    formats/video_folder.py set `name`, `rank` and `medium`)."""

    medium: Medium

    def detect(self, probe: Probe) -> bool:
        # class folders holding the medium's files and no image (else an ImageFolder tree)
        return probe.folder == "imagefolder" and is_media_tree(probe.path, self.medium)

    def open(self, src: str, opening: Opening) -> Opened:
        from fastloader.pack.sources.formats.librispeech import refuse_as

        refuse_as(src, f'class folders of {self.medium.files} '
                       f'(source_format="{self.medium.source}")')
        return open_media_tree(src, self.medium, opening.fields, opening.image, opening.label,
                               opening.root)

    def files(self, path: str) -> list[Path]:
        return sorted(p for p in Path(path).rglob("*") if p.is_file())
