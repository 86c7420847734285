"""A pack's options: one typed object, checked in full before any file is read or written.

PackOptions holds what fastloader.pack() and packdata take for every source (the source's own
arguments, an importer's image/label/root or Python samples' fields, stay with the source);
`checked()` validates every value at once and resolves the defaults (workers, tiles), so a bad
option never leaves a staging folder behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastloader.checks import int_at_least
from fastloader.decode.tiles import DEFAULT_RESTART_MCUS
from fastloader.errors import PackError, invalid_argument, invalid_type
from fastloader.format.backends import backend_for_suffix
from fastloader.format.manifest import BACKENDS
from fastloader.pack.engines.progress import Progress
from fastloader.pack.sources import tiling
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE
from fastloader.pack.staging.journal import is_dataset

DEFAULT_SHARD_SIZE = 256 << 20
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class PackOptions:
    """How to pack (see fastloader.pack for each option); `checked()` before use."""

    format: str | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    workers: int | None = None
    max_side: int | None = None
    quality: int = 90
    overwrite: bool = False
    resume: bool = False
    strict: bool = False
    skip_bad: bool = False
    quiet: bool = True
    progress: Progress | None = None
    tiles: bool = False
    restart_mcus: int = DEFAULT_RESTART_MCUS
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    engine: str = "local"
    ray_address: str | None = None
    storage_options: dict[str, Any] | None = None
    shard_samples: int | None = None

    def checked(self) -> PackOptions:
        """These options with every value checked and workers resolved (None: every usable
        core); PackError or InvalidArgumentError naming the first bad one."""
        shard_size, workers, max_side, quality = check_sizes(
            self.shard_size, self.workers, self.max_side, self.quality)
        for name in ("overwrite", "resume", "strict", "skip_bad", "quiet", "tiles"):
            if not isinstance(getattr(self, name), bool):
                raise invalid_type(name, getattr(self, name), "a bool")
        if self.strict and self.skip_bad:
            raise PackError("strict=True and skip_bad=True contradict each other: "
                            "the first stops at the first bad item (the default), the second "
                            "packs the rest and lists them in skipped.json; pass one.")
        check_engine(self.engine, self.ray_address)
        tiling.check_tiles_option(self.tiles, self.restart_mcus)
        max_file_size = int_at_least("max_file_size", self.max_file_size, 1,
                                     "Pass a size in bytes.")
        if self.storage_options is not None and not isinstance(self.storage_options, dict):
            raise invalid_type("storage_options", self.storage_options, "a dict or None")
        return replace(self, shard_size=shard_size, workers=workers, max_side=max_side,
                       quality=quality, max_file_size=max_file_size)

    @property
    def tile_option(self) -> dict[str, int] | None:
        """The manifest's tiles entry ({version, restart_mcus}), or None untiled."""
        return tiling.check_tiles_option(self.tiles, self.restart_mcus)


def check_sizes(
    shard_size: Any, workers: Any, max_side: Any, quality: Any
) -> tuple[int, int, int | None, int]:
    """shard_size, workers (None: every usable core), max_side and quality, checked."""
    shard_size = int_at_least("shard_size", shard_size, 1, "Pass a size in bytes, e.g. 256 MiB.")
    if workers is None:
        workers = len(os.sched_getaffinity(0))
    workers = int_at_least("workers", workers, 1, "Pass 1 or more (default: all cores).")
    if max_side is not None:
        max_side = int_at_least("max_side", max_side, 1, "Pass a pixel count or None.")
    quality = int_at_least("quality", quality, 1, "Pass a JPEG quality in 1..100.")
    if quality > 100:
        raise invalid_argument("quality", quality, "must be in 1..100", "Try 90.")
    return shard_size, workers, max_side, quality


def resolve_backend(dst: Path | str, format: str | None) -> str:
    """The backend for dst (a path or URL): `format` if given (must agree with a known suffix),
    else the suffix."""
    from_suffix = backend_for_suffix(Path(dst))
    if format is None:
        if from_suffix is None:
            raise PackError(
                f"cannot tell the format of {dst} from its suffix {Path(dst).suffix!r}; name it "
                "NAME.lmdb or NAME.h5, or pass --format lmdb|hdf5."
            )
        return from_suffix
    chosen = {"h5": "hdf5"}.get(format.lower(), format.lower())
    if chosen not in BACKENDS:
        raise PackError(f"unknown format {format!r} for {dst}; choose lmdb or hdf5.")
    if from_suffix is not None and from_suffix != chosen:
        raise PackError(
            f"{dst} has the {from_suffix} suffix {Path(dst).suffix!r} but format {format!r} was "
            "asked; "
            "make the suffix and --format agree."
        )
    return chosen


def check_destination(dst: Path, src: Path | str, overwrite: bool) -> None:
    """PackError unless dst can be created (or, with overwrite, replaced) outside src."""
    if not dst.parent.is_dir():
        raise PackError(
            f"cannot create {dst}: its parent folder {dst.parent} does not exist; create it "
            "first or choose another DST."
        )
    if dst == src or src in dst.parents:
        raise PackError(f"DST {dst} is inside SRC {src}; write the dataset outside the source.")
    if not (dst.exists() or dst.is_symlink()):
        return
    if not overwrite:
        raise PackError(
            f"{dst} already exists; pass --overwrite to replace it or choose another DST."
        )
    empty_dir = dst.is_dir() and not any(dst.iterdir())
    if not (is_dataset(dst) or empty_dir):
        raise PackError(
            f"{dst} exists and is not a packed dataset, so --overwrite will not delete it; "
            "remove it yourself or choose another DST."
        )


def check_engine(engine: Any, ray_address: Any) -> None:
    """engine is "local" or "ray"; ray_address only with "ray"."""
    if engine not in ENGINES:
        raise invalid_argument("engine", engine, f"must be one of {ENGINES}",
                               "Pass 'local' (this machine's processes) or 'ray'.")
    if ray_address is not None and engine != "ray":
        raise PackError("ray_address (--ray-address) needs engine='ray' (--engine ray).")
