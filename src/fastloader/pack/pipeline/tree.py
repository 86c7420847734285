"""pack(): turn an image tree into a packed dataset; parallel, atomic and resumable.

scan the tree -> a shard plan (staging/plan.py: the sorted listing cut by a rule of the files
alone) in the staging folder -> one task per shard (staging/build.py; run by engines/: local
processes or Ray) -> the commit step (staging/commit.py) checks every part and writes the
index and manifest.json (format v1) last, then renames the folder to DST. `packdata
plan/shard/commit` run these steps apart.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastloader.errors import PackError
from fastloader.format.manifest import Manifest
from fastloader.format.remote import is_url
from fastloader.pack.engines.progress import Progress
from fastloader.pack.pipeline.drive import drive
from fastloader.pack.pipeline.options import (
    DEFAULT_SHARD_SIZE,
    PackOptions,
    check_destination,
    resolve_backend,
)
from fastloader.pack.pipeline.run import run_pending
from fastloader.pack.sources import tiling
from fastloader.pack.sources.scan import scan
from fastloader.pack.sources.scan_remote import scan_url
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE
from fastloader.pack.staging.commit import SKIPPED_NAME
from fastloader.pack.staging.items import BAD_ITEM_FIX, TreeItems
from fastloader.pack.staging.journal import Staging, staging_path
from fastloader.pack.staging.plan import (
    MAX_SHARD_FILES,
    ShardPlan,
    TaskSettings,
    from_scan,
)
from fastloader.pack.staging.remote_stage import RemoteStaging


def pack(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    format: str | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    workers: int | None = None,
    max_side: int | None = None,
    quality: int = 90,
    overwrite: bool = False,
    resume: bool = False,
    strict: bool = False,
    skip_bad: bool = False,
    quiet: bool = True,
    progress: Progress | None = None,
    tiles: bool = False,
    restart_mcus: int = tiling.tiles.DEFAULT_RESTART_MCUS,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    engine: str = "local",
    ray_address: str | None = None,
    storage_options: dict[str, Any] | None = None,
    apply_exif_orientation: bool = False,
) -> Manifest:
    """Pack the ImageFolder tree at src into a sharded dataset folder dst; the Manifest
    written (also dst/manifest.json).

    Records keep the original bytes unless max_side is set and an image is larger (then JPEG at
    quality). An unreadable image stops the pack (naming it) unless skip_bad, which packs the
    rest and lists it in dst/skipped.json. dst appears only when complete (built in a hidden
    staging folder, renamed last).

    Args:
        src: the image tree, src/<class>/<images> (found recursively; hidden and non-image files
            are ignored), or its URL (listed once here, each file read by the tasks).
        dst: the dataset folder to create, NAME.lmdb or NAME.h5, or its URL (each task uploads
            its shard; manifest.json last: see pack/staging/remote_stage.py).
        format ... storage_options, apply_exif_orientation: how to pack, each described on
            PackOptions (pack/pipeline/options.py), checked there in full before any file is read.

    Returns:
        Manifest: what was written (also in dst/manifest.json).

    Raises:
        PackError: a bad source or destination, no decodable image, tiles without the
            extension, engine="ray" without Ray, strict with skip_bad, or (without skip_bad)
            an unreadable image. InvalidArgumentError: an option is out of range. OSError:
            the disk filled or a file could not be written (rerun with resume=True).
    """
    options = PackOptions(
        format=format, shard_size=shard_size, workers=workers, max_side=max_side,
        quality=quality, overwrite=overwrite, resume=resume, strict=strict, skip_bad=skip_bad,
        quiet=quiet, progress=progress, tiles=tiles, restart_mcus=restart_mcus,
        max_file_size=max_file_size, engine=engine, ray_address=ray_address,
        storage_options=storage_options, apply_exif_orientation=apply_exif_orientation).checked()
    return drive(TreeSource(src), dst, options)


class TreeSource:
    """An ImageFolder tree (a folder, or its URL) as the pipeline's source: listed by the scan,
    cut into a ShardPlan, each file read by the tasks (staging/items.TreeItems), committed as
    format v1; its identity for resume is each file's path, label, size and mtime
    (TreeItems.keys)."""

    resumable = True

    def __init__(self, src: str | os.PathLike[str]) -> None:
        self.src = src
        self.path: Path | str = str(src) if is_url(src) else Path(src).expanduser().absolute()

    def open_staging(self, dst: str | os.PathLike[str], options: PackOptions
                     ) -> tuple[Staging | RemoteStaging, str]:
        """dst's staging, checked but not opened, and its backend: a folder beside a path
        DST, or the remote staging of a URL DST (remote_stage.py; each task uploads its
        part)."""
        if is_url(dst):
            backend = resolve_backend(str(dst), options.format)
            if isinstance(self.path, str) and str(dst).startswith(self.path.rstrip("/") + "/"):
                raise PackError(f"DST {dst} is inside SRC {self.path}; write the dataset "
                                "outside the source.")
            remote = RemoteStaging(str(dst), options.storage_options)
            remote.check_destination(options.overwrite)
            return remote, backend
        dst_path = Path(dst).expanduser().absolute()
        backend = resolve_backend(dst_path, options.format)
        check_destination(dst_path, self.path, options.overwrite)
        return Staging(dst_path), backend

    def listing(self, staging: Staging | RemoteStaging, backend: str, options: PackOptions
                ) -> tuple[ShardPlan, dict[str, object], dict[str, object]]:
        """The tree scanned (a bad file stops here unless skip_bad) and its listing cut."""
        result = (scan_url(self.path, options.max_file_size, options.storage_options)
                  if isinstance(self.path, str) else scan(self.path, options.max_file_size))
        bad = result.bad_data()  # a folder link's refusal is listed, not a reason to stop
        if not options.skip_bad and bad:
            path, reason = bad[0]
            raise PackError(f"{result.root}/{path}: {reason}; {BAD_ITEM_FIX}")
        identity: dict[str, object] = {"backend": backend, "src": str(self.path),
                                    "classes": result.classes,
                                    "shard_files": MAX_SHARD_FILES}
        identity |= options.plan_entries()
        run: dict[str, object] = {"skip_bad": options.skip_bad, "overwrite": options.overwrite}
        return from_scan(result, options.shard_size), identity, run

    def run(self, staging: Staging | RemoteStaging, plan: ShardPlan | None,
            settings: TaskSettings, options: PackOptions) -> tuple[ShardPlan, set[int]]:
        assert isinstance(plan, ShardPlan)
        # a URL source's storage options: never saved
        task = replace(settings, storage_options=options.storage_options)
        return plan, run_pending(staging, plan, TreeItems(plan, task), task, options)


__all__ = ["DEFAULT_SHARD_SIZE", "SKIPPED_NAME", "TreeSource", "pack",
           "staging_path"]
