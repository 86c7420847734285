"""pack(): turn an image tree into a packed dataset; parallel, atomic and resumable.

The tree is an importer of {image, label} samples over its listing (sources/formats/
image_folder.py), packed through the one lane every source takes (pipeline/samples.py): its
sorted listing cut into a shard plan by the files' sizes, one task per shard, the commit
writing format v2 (image + label) last. This module is the tree's typed entry point.
"""

from __future__ import annotations

import os
from typing import Any

from fastloader.format.manifest import Manifest
from fastloader.pack.engines.progress import Progress
from fastloader.pack.pipeline.options import DEFAULT_SHARD_SIZE, PackOptions, refuse_inside
from fastloader.pack.pipeline.samples import SampleSource, pack_samples
from fastloader.pack.sources import importers, tiling
from fastloader.pack.sources.formats.image_folder import ImageFolder
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE
from fastloader.pack.staging.commit import SKIPPED_NAME
from fastloader.pack.staging.journal import staging_path


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

    A format v2 dataset of the fields image and label (the class folders, sorted, its
    classes). Records keep the original bytes unless max_side is set and an image is larger
    (then JPEG at quality). An unreadable image stops the pack (naming it) unless skip_bad,
    which packs the rest and lists it in dst/skipped.json. dst appears only when complete
    (built in a hidden staging folder, renamed last).

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
    return pack_tree(src, dst, options)


def tree_source(src: str | os.PathLike[str], options: PackOptions) -> SampleSource:
    """The tree at src as the pipeline's source: the ImageFolder importer's {image, label}
    samples (sources/formats/image_folder.py), opened by the tree's absolute path (or URL)
    as a shard task reads them."""
    kind = ImageFolder.name
    reopen = importers.reopen_description(src, kind, fields=None, image=None, label=None,
                                          root=None, skip_empty=False, masks=False)
    assert reopen is not None  # the tree's description is JSON
    samples, specs, source = importers.open_source(
        reopen["src"], kind, fields=None, image=None, label=None, root=None,
        storage_options=options.storage_options, max_file_size=options.max_file_size)
    return SampleSource(samples, specs, source, reopen)


def pack_tree(src: str | os.PathLike[str], dst: str | os.PathLike[str], options: PackOptions
              ) -> Manifest:
    """Pack the tree at src into dst with checked options, through the one lane every source
    takes (pipeline/samples.py)."""
    refuse_inside(src, dst)
    tree = tree_source(src, options)
    return pack_samples(tree.samples, dst, tree.specs, options, source=tree.source,
                        reopen=tree.reopen)


__all__ = ["DEFAULT_SHARD_SIZE", "SKIPPED_NAME", "pack", "pack_tree", "staging_path",
           "tree_source"]
