"""A toy loader output for tests/test_loader_outputs.py: its settings (Toy, what `toy=` takes)
and its path's options, as a kind's settings module declares them (loader/factory/audio_options.py);
its loader is tests/toyloader.py, imported by FastLoader when its path is first chosen."""

from __future__ import annotations

from dataclasses import dataclass

from fastloader.errors import invalid_type
from fastloader.loader.factory.options import LoaderOptions
from fastloader.loader.factory.paths import LoaderPath


@dataclass(frozen=True)
class Toy:
    """The toy output's settings: each batch is its records' byte lengths, plus `offset`."""

    offset: int = 0


@dataclass
class ToyOptions(LoaderOptions):
    """The toy loader's options: every path's, and toy= itself."""

    batch_size: int = 1
    toy: Toy | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.toy, Toy):
            raise invalid_type("toy", self.toy, "a Toy(...)")


# Its registry line, as loader/factory/paths.py's PATHS would hold it.
TOY = LoaderPath("toy loader", ToyOptions, "toyloader", "toy loader of a packed dataset",
                 "Drop it: the toy loader takes toy= only.", argument="toy", records="records")
