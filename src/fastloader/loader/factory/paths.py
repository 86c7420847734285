"""Every loader path FastLoader builds, declared once: its name, its options class, the module of
its loader, the words its refusals use and their fixes, and (for a loader its own keyword chooses:
audio=, video=) that keyword.

path_choice picks a path from this table, option_paths reads each path's options and refusals
from it, and the factory (base.py) imports a path's loader module the first time the path is
chosen, so this module imports no loader. A new loader path is one LoaderPath in PATHS.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from fastloader.loader.factory.audio_options import AudioOptions
from fastloader.loader.factory.options import (
    DaliOptions,
    DropInOptions,
    LoaderOptions,
    PackedOptions,
)
from fastloader.loader.factory.video_options import VideoOptions


@dataclass(frozen=True)
class LoaderPath:
    """One loader path.

    Args:
        name: the path's name ("packed loader"), as refusals and FastLoader._paths say it.
        options: the path's options dataclass (a LoaderOptions): what arguments it takes.
        loader: the module defining the loader class (class X(FastLoader, path=name)).
        words: the path in a refusal's "not to the ..." ("packed path").
        fix: the fix when an argument of another path is given to this one.
        argument: the keyword that chooses the path ("audio": FastLoader(path,
            audio=Audio(...))); None for a path chosen by `data` and `backend`. Another path
            refuses it by name.
        records: what such a loader's dataset holds, in "a dataset of ..." ("clips").
        own_fix: the fix when an argument only this path takes is given to another path;
            None: that path's own fix. own_fixes: the same, for a path named there.
    """

    name: str
    options: type[LoaderOptions]
    loader: str
    words: str
    fix: str
    argument: str | None = None
    records: str = ""
    own_fix: str | None = None
    own_fixes: Mapping[str, str] = field(default_factory=dict)

    def import_loader(self) -> None:
        """Import the loader's module: its class registers its path with FastLoader."""
        importlib.import_module(self.loader)


# name -> path: the paths chosen by `data` and `backend` first, then those chosen by their own
# argument, in the order path_choice checks them. A test may add one for its run
# (monkeypatch.setitem), so readers look it up on each use rather than copying it.
PATHS: dict[str, LoaderPath] = {path.name: path for path in (
    LoaderPath(
        "packed loader", PackedOptions, "fastloader.loader.packed.loader", "packed path",
        "Drop it, or pass backend='dali' for the DALI loader."),
    LoaderPath(
        "DALI loader", DaliOptions, "fastloader.loader.dali.loader", "DALI loader",
        "Drop it, or use the native backend (backend='auto')."),
    LoaderPath(
        "drop-in loader", DropInOptions, "fastloader.loader.dropin.loader",
        "drop-in loader of a torch Dataset",
        "Apply transforms inside the Dataset and use num_workers=/prefetch_factor=, or pack the "
        "images with `packdata` and pass the packed path."),
    LoaderPath(
        "audio loader", AudioOptions, "fastloader.loader.clips.audio",
        "audio loader of a packed audio dataset",
        "Drop it: the audio loader (audio=) decodes clips, not images.",
        argument="audio", records="clips",
        own_fix="Drop it, or pass audio=fastloader.Audio(...) for the audio loader of a packed "
                "audio dataset.",
        own_fixes={"drop-in loader": "Decode the clips inside the Dataset and use num_workers=/"
                                     "prefetch_factor=, or pack the audio dataset with "
                                     "`packdata` and pass the packed path with "
                                     "audio=fastloader.Audio(...)."}),
    LoaderPath(
        "video loader", VideoOptions, "fastloader.loader.clips.video",
        "video loader of a packed video dataset",
        "Drop it: the video loader (video=) takes the transforms, fields and threads options "
        "only.",
        argument="video", records="videos"),
)}

