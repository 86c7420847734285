"""pack(): turn an image tree into a packed dataset; parallel, atomic and resumable.

scan the tree -> a shard plan (plan.py: the sorted listing cut by a rule of the files alone)
in the staging folder -> one task per shard (part.py; run by engines.py: local processes or
Ray) -> the commit step (commit.py) checks every part and writes the index and manifest.json
last, then renames the folder to DST. `packdata plan/shard/commit` run these steps apart.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fastloader.checks import int_at_least
from fastloader.errors import PackError, invalid_argument
from fastloader.format.backends import backend_for_suffix
from fastloader.format.manifest import BACKENDS, Manifest
from fastloader.format.remote import is_url
from fastloader.pack.engines.local import ENGINES, Meter, Progress, pending_shards
from fastloader.pack.sources import tiling
from fastloader.pack.sources.scan import scan
from fastloader.pack.sources.scan_remote import scan_url
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE
from fastloader.pack.staging.commit import SKIPPED_NAME, commit
from fastloader.pack.staging.journal import Staging, is_dataset, staging_path
from fastloader.pack.staging.part import SETTINGS_NAME, Stage
from fastloader.pack.staging.plan import MAX_SHARD_FILES, PLAN_DIR, ShardPlan, from_scan
from fastloader.pack.staging.remote_stage import RemoteStaging

DEFAULT_SHARD_SIZE = 256 << 20


def _check_options(
    shard_size: Any, workers: Any, max_side: Any, quality: Any
) -> tuple[int, int, int | None, int]:
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


def _check_destination(dst: Path, src: Path | str, overwrite: bool) -> None:
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


def plan_pack(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    format: str | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    max_side: int | None = None,
    quality: int = 90,
    overwrite: bool = False,
    resume: bool = False,
    strict: bool = False,
    tiles: bool = False,
    restart_mcus: int = tiling.tiles.DEFAULT_RESTART_MCUS,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    storage_options: dict[str, Any] | None = None,
) -> tuple[Staging | RemoteStaging, ShardPlan, dict[str, Any]]:
    """Scan src and write the shard plan into dst's staging folder (locked on return), or
    into the remote staging of a URL dst (remote_stage.py; uploaded, not locked).

    Without resume, or when the options differ from the staged plan's, the folder is cleared;
    resuming keeps the parts (each is reused only if made from the same files). Returns the
    staging (the caller releases it), the plan and the settings every shard task reads.
    """
    shard_size, _, max_side, quality = _check_options(shard_size, 1, max_side, quality)
    tile_option = tiling.check_tiles_option(tiles, restart_mcus)
    src_path = str(src) if is_url(src) else Path(src).expanduser().absolute()
    staging: Staging | RemoteStaging
    if is_url(dst):  # the staging is remote too (remote_stage.py)
        backend = resolve_backend(str(dst), format)
        if isinstance(src_path, str) and str(dst).startswith(src_path.rstrip("/") + "/"):
            raise PackError(f"DST {dst} is inside SRC {src_path}; write the dataset outside "
                            "the source.")
        staging = RemoteStaging(str(dst), storage_options)
        staging.check_destination(overwrite)
    else:
        dst_path = Path(dst).expanduser().absolute()
        backend = resolve_backend(dst_path, format)
        _check_destination(dst_path, src_path, overwrite)
        staging = Staging(dst_path)
    max_file_size = int_at_least("max_file_size", max_file_size, 1, "Pass a size in bytes.")
    result = (scan_url(src_path, max_file_size, storage_options) if isinstance(src_path, str)
              else scan(src_path, max_file_size))
    if strict and result.refused:  # the scan's refusals count as unreadable files
        path, reason = result.refused[0]
        raise PackError(f"{result.root}/{path}: {reason}; fix or remove it, or pack without "
                        "--strict to skip (and list) such files.")
    plan = from_scan(result, shard_size)
    identity: dict[str, Any] = {"backend": backend, "src": str(src_path),
                                "classes": result.classes, "shard_size": shard_size,
                                "max_side": max_side, "quality": quality,
                                "max_file_size": max_file_size, "shard_files": MAX_SHARD_FILES}
    if tile_option is not None:
        identity["tiles"] = tile_option
    run = {"strict": strict, "overwrite": overwrite}
    try:
        if isinstance(staging, RemoteStaging):
            staging.open(identity, resume, overwrite)
        else:
            staging.open(identity, resume)
        plan.save(staging.dir)
        (staging.dir / PLAN_DIR / SETTINGS_NAME).write_text(json.dumps(run, sort_keys=True))
        if isinstance(staging, RemoteStaging):
            staging.publish_plan(SETTINGS_NAME)
    except BaseException:
        staging.release()
        raise
    return staging, plan, identity | run


def _check_engine(engine: Any, ray_address: Any) -> None:
    if engine not in ENGINES:
        raise invalid_argument("engine", engine, f"must be one of {ENGINES}",
                               "Pass 'local' (this machine's processes) or 'ray'.")
    if ray_address is not None and engine != "ray":
        raise PackError("ray_address (--ray-address) needs engine='ray' (--engine ray).")


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
    quiet: bool = True,
    progress: Progress | None = None,
    tiles: bool = False,
    restart_mcus: int = tiling.tiles.DEFAULT_RESTART_MCUS,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    engine: str = "local",
    ray_address: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Manifest:
    """Pack the ImageFolder tree at src into a sharded dataset folder dst.

    Records keep the original bytes unless max_side is set and an image is larger (then JPEG at
    quality). Unreadable images are skipped and listed in dst/skipped.json. dst appears only when
    complete (built in a hidden staging folder, renamed last).

    Args:
        src: the image tree, src/<class>/<images> (found recursively; hidden and non-image files
            are ignored), or its URL (listed once here, each file read by the tasks).
        dst: the dataset folder to create, NAME.lmdb or NAME.h5, or its URL (each task uploads
            its shard; manifest.json last: see pack/staging/remote_stage.py).
        format: "lmdb", "hdf5" or None (from dst's suffix).
        shard_size: bytes per shard file.
        workers: processes that read and check images (None: every usable core); with
            engine="ray" and no cluster, the CPUs of the local Ray instance.
        max_side: re-encode images whose longer side exceeds it, as JPEG; None keeps all bytes.
        quality: the JPEG quality of those re-encodes, 1-100.
        overwrite: replace dst if it is a packed dataset.
        resume: reuse the finished shards of an interrupted pack of the same src and options
            (each one only if its files are unchanged).
        strict: fail on the first unreadable image instead of skipping it.
        quiet: no progress bar (quiet=False shows tqdm's when stderr is a terminal).
        progress: called as progress(files_done, files_total, bytes_done) after each file.
        tiles: repack JPEGs losslessly as restart-tiled records (decode-aware packing; needs
            the native extension), so crops decode only the segments they cover.
        restart_mcus: with tiles, at most this many MCUs per restart segment.
        max_file_size: files over this many bytes are not read (listed in skipped.json), nor
            is anything that is not a regular file (FIFOs, devices).
        engine: who runs the shard tasks: "local" (this machine's processes) or "ray" (one
            Ray task per shard; needs `pip install "fastloader[ray]"`). Both give the same
            dataset: shards are cut by the files' count and sizes alone.
        ray_address: with engine="ray", the cluster to join (None: the Ray instance this
            process joined, else a local one with `workers` CPUs).
        storage_options: fsspec options (endpoint_url, key, secret, ...) for a src or dst
            given as a URL (s3://bucket/x.lmdb, gs://..., file://...); None: the standard
            ones (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...). They travel to the Ray tasks with
            a URL dst, and are never written to the staging.

    Returns:
        Manifest: what was written (also in dst/manifest.json).

    Raises:
        PackError: a bad source or destination, no decodable image, tiles without the
            extension, engine="ray" without Ray installed, or (strict=True) an unreadable
            image.
        InvalidArgumentError: an option is out of range.
        OSError: the disk filled or a file could not be written (rerun with resume=True).
    """
    _check_engine(engine, ray_address)
    _, workers, _, _ = _check_options(shard_size, workers, max_side, quality)
    staging, plan, settings = plan_pack(
        src, dst, format=format, shard_size=shard_size, max_side=max_side, quality=quality,
        overwrite=overwrite, resume=resume, strict=strict, tiles=tiles,
        restart_mcus=restart_mcus, max_file_size=max_file_size, storage_options=storage_options)
    try:
        remote = isinstance(staging, RemoteStaging)
        todo = (staging.pending(plan, resume) if isinstance(staging, RemoteStaging)
                else pending_shards(staging.dir, plan, resume))
        stage: Stage = staging.stage if isinstance(staging, RemoteStaging) else staging.dir
        meter = Meter(plan, todo, progress, quiet)
        settings["storage_options"] = storage_options  # a URL source's; never written down
        try:
            if engine == "ray":
                from fastloader.pack.engines.local import run_ray

                written = run_ray(stage, todo, workers, ray_address, meter)
            else:
                from fastloader.pack.engines.local import run_local

                written = run_local(stage, plan, todo, settings, workers, meter)
        finally:
            meter.close()
        # pending_shards hashed these just now (a URL's shards are checked by size only)
        hashed = set() if remote else set(range(plan.num_shards)) - set(todo)
        manifest = commit(staging, plan, settings, overwrite, trusted=set(written) | hashed)
    finally:
        staging.release()
    return manifest


__all__ = ["DEFAULT_SHARD_SIZE", "SKIPPED_NAME", "pack", "plan_pack",
           "resolve_backend", "staging_path"]
