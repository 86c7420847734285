"""The loaders a keyword argument chooses (audio=, video=): each declared once, here, by name.

A kind whose batches its own loader makes (timed clips: audio, video) is one LoaderOutput in
OUTPUTS: the argument that chooses it, its path's name, its options class and its loader's
module, named as strings and imported only when first needed, so that importing this module
(path_choice, option_paths, base read it) costs nothing and the `packdata` CLI never imports a
loader. path_choice picks the path from it, option_paths reads each path's options class from
it, and FastLoader imports the loader's module the first time its path is chosen.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoaderOutput:
    """One loader chosen by its own keyword argument, FastLoader(path, audio=Audio(...)).

    Args:
        argument: the keyword that chooses the loader ("audio"); its value is the output's
            settings object, and another path refuses it by name.
        path: the path's name ("audio loader"), as refusals and FastLoader._paths say it.
        options: "module:Class" of the path's options dataclass (a LoaderOptions).
        loader: the module defining the loader class (class X(FastLoader, path=path)).
        records: what the loader's dataset holds, in "a dataset of ..." ("clips").
        words: the path in a refusal's "not to the ..." ("audio loader of a packed audio
            dataset").
        fix: the fix when an argument of another path is given to this one.
        own_fix: the fix when an argument only this path takes is given to another path;
            None: that path's own fix. own_fixes: the same, for a path named there.
    """

    argument: str
    path: str
    options: str
    loader: str
    records: str
    words: str
    fix: str
    own_fix: str | None = None
    own_fixes: Mapping[str, str] = field(default_factory=dict)

    def options_class(self) -> type:
        """The path's options dataclass, imported on first use."""
        module, name = self.options.split(":")
        cls: type = getattr(importlib.import_module(module), name)
        return cls

    def import_loader(self) -> None:
        """Import the loader's module: its class registers its path with FastLoader."""
        importlib.import_module(self.loader)


# argument -> its loader, in the order path_choice checks them. A test may add one for its run
# (monkeypatch.setitem), so readers look it up on each use rather than copying it.
OUTPUTS: dict[str, LoaderOutput] = {output.argument: output for output in (
    LoaderOutput(
        "audio", "audio loader", "fastloader.loader.audio_options:AudioOptions",
        "fastloader.loader.audio", "clips", "audio loader of a packed audio dataset",
        "Drop it: the audio loader (audio=) decodes clips, not images.",
        own_fix="Drop it, or pass audio=fastloader.Audio(...) for the audio loader of a packed "
                "audio dataset.",
        own_fixes={"drop-in loader": "Decode the clips inside the Dataset and use num_workers=/"
                                     "prefetch_factor=, or pack the audio dataset with "
                                     "`packdata` and pass the packed path with "
                                     "audio=fastloader.Audio(...)."}),
    LoaderOutput(
        "video", "video loader", "fastloader.loader.video_options:VideoOptions",
        "fastloader.loader.video", "videos", "video loader of a packed video dataset",
        "Drop it: the video loader (video=) takes the transforms, fields and threads "
        "options only."),
)}


def output_of(path: str) -> LoaderOutput | None:
    """The registered output whose path is `path` (None: a path of its own, packed, DALI ...)."""
    return next((o for o in OUTPUTS.values() if o.path == path), None)
