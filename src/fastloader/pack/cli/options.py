"""packdata's flags -> PackOptions, in one place: `packdata SRC DST` and `packdata plan` read
their pack options here, so a flag cannot reach one command and miss the other."""

from __future__ import annotations

import argparse

from fastloader.pack.pipeline.options import PackOptions

# PackOptions fields no packdata flag sets, and why (tests/test_pack_options_declared.py
# fails when a field is in neither this nor pack_options()).
NOT_FLAGS = {
    "progress": "a Python callable; packdata shows tqdm's bar unless --quiet",
    "storage_options": "fsspec's; packdata reads the standard AWS_*/GOOGLE_* variables",
    "shard_samples": "Python samples only; packdata packs sources it can list",
}


def pack_options(args: argparse.Namespace) -> PackOptions:
    """The PackOptions of parsed `packdata SRC DST` / `packdata plan SRC DST` flags."""
    return PackOptions(
        format=args.format,
        shard_size=args.shard_size,
        workers=args.workers,
        max_side=args.max_side,
        quality=args.quality,
        overwrite=args.overwrite,
        resume=args.resume,
        strict=args.strict,
        skip_bad=args.skip_bad,
        quiet=args.quiet,
        tiles=args.tiles,
        restart_mcus=args.restart_mcus,
        max_file_size=args.max_file_size,
        engine=args.engine,
        ray_address=args.ray_address,
        apply_exif_orientation=args.apply_exif_orientation,
        codec=args.codec,
        skip_space_check=args.skip_space_check,
    )
