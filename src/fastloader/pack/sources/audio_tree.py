"""A folder of class sub-folders of clips (Speech Commands style) as Python-style samples: each
clip's path as an `audio` field and its folder's index as a `label` int with the folders' names
as classes; packed like any importer's samples (the clips stored as given)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastloader.decode.audio import AUDIO_EXTENSIONS
from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec
from fastloader.pack.sources.values import PATH_KEY, WHERE_KEY

_IMAGES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def is_clip_tree(folder: Path, limit: int = 2000) -> bool:
    """Whether the folder's first `limit` files hold clips and no images (a tree of images
    stays an ImageFolder)."""
    clips = False
    for count, file in enumerate(p for p in folder.rglob("*") if p.is_file()):
        if count >= limit:
            break
        suffix = file.suffix.lower()
        if suffix in _IMAGES:
            return False
        clips = clips or suffix in AUDIO_EXTENSIONS
    return clips


def open_audio_tree(src: str | os.PathLike[str], fields: Any, image: Any, label: Any,
                    root: Any) -> tuple[list[dict[str, Any]], list[FieldSpec], dict[str, Any]]:
    """(samples, fields, source description) of a folder of class sub-folders of clips."""
    if fields or image or label or root:
        raise PackError("fields=, image=, label= and root= are table options; a folder of "
                        "class folders of clips has the fields audio and label.")
    top = Path(src).expanduser().absolute()
    loose = sorted(p.name for p in top.iterdir()
                   if p.is_file() and p.suffix.lower() in AUDIO_EXTENSIONS)
    if loose:
        raise PackError(f"{top}: clip {loose[0]!r} is not in a class folder; a folder of clips "
                        "holds one sub-folder per class (move it into one, or pack a table).")
    classes = sorted(p.name for p in top.iterdir() if p.is_dir())
    samples = []
    for label_id, name in enumerate(classes):
        for path in sorted((top / name).rglob("*")):
            if path.is_file() and path.suffix.lower() in AUDIO_EXTENSIONS:
                relative = path.relative_to(top).as_posix()
                samples.append({WHERE_KEY: relative, PATH_KEY: relative, "audio": str(path),
                                "label": label_id})
    if not samples:
        raise PackError(f"{top}: no clips ({', '.join(AUDIO_EXTENSIONS)}) in its class folders.")
    specs = [FieldSpec("audio", "audio"), FieldSpec("label", "int", classes=tuple(classes))]
    return samples, specs, {"kind": "audiofolder", "path": str(top)}
