"""pack(): turn an image tree into a packed dataset; parallel, atomic and resumable."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.checks import int_at_least
from fastloader.errors import PackError, invalid_argument
from fastloader.format import index as index_mod
from fastloader.format.backends import backend_for_suffix, backend_module
from fastloader.format.manifest import BACKENDS, Manifest, ShardInfo
from fastloader.pack import tiling
from fastloader.pack.journal import (
    SAMPLE_COLUMNS,
    ShardRecord,
    Staging,
    file_digest,
    is_dataset,
    staging_path,
)
from fastloader.pack.scan import Listing, ScanResult, SourceFile, scan
from fastloader.pack.validate import DEFAULT_MAX_FILE_SIZE, Prepared, prepare

DEFAULT_SHARD_SIZE = 256 << 20
SKIPPED_NAME = "skipped.json"
log = logging.getLogger(__name__)  # a child of the "fastloader" logger
# Test hook: SIGKILL this process right after this many shards are journaled in one run, so a
# test can check that a killed pack leaves no dataset and that --resume finishes it.
KILL_AFTER_SHARDS_ENV = "FASTLOADER_PACK_TEST_KILL_AFTER_SHARDS"
_WINDOW_BYTES = 64 << 20  # source bytes in flight per pool window: bounds memory
_WINDOW_FILES = 2048

Progress = Callable[[int, int, int], None]  # (files done, files total, source bytes done)


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


def resolve_backend(dst: Path, format: str | None) -> str:
    """The backend for dst: `format` if given (must agree with a known suffix), else the suffix."""
    from_suffix = backend_for_suffix(dst)
    if format is None:
        if from_suffix is None:
            raise PackError(
                f"cannot tell the format of {dst} from its suffix {dst.suffix!r}; name it "
                "NAME.lmdb or NAME.h5, or pass --format lmdb|hdf5."
            )
        return from_suffix
    chosen = {"h5": "hdf5"}.get(format.lower(), format.lower())
    if chosen not in BACKENDS:
        raise PackError(f"unknown format {format!r} for {dst}; choose lmdb or hdf5.")
    if from_suffix is not None and from_suffix != chosen:
        raise PackError(
            f"{dst} has the {from_suffix} suffix {dst.suffix!r} but format {format!r} was asked; "
            "make the suffix and --format agree."
        )
    return chosen


def _check_destination(dst: Path, src: Path, overwrite: bool) -> None:
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


class _ShardBuilder:
    """Collects prepared records and writes a shard each time shard_size is reached."""

    def __init__(
        self, staging: Staging, backend: str, shard_size: int, done: list[ShardRecord], tiled: bool
    ):
        self.staging = staging
        self.tiles = tiling.TileColumns() if tiled else None
        self.module = backend_module(backend)
        self.shard_size = shard_size
        self.records: list[ShardRecord] = list(done)
        self.next_sample = sum(r.info.count for r in done)
        self.tail_skipped: list[list[str]] = []
        self._reset()
        self._written_this_run = 0
        self._kill_after = int(os.environ.get(KILL_AFTER_SHARDS_ENV, "0") or 0)

    def _reset(self) -> None:
        self.data: list[bytes] = []
        self.size = 0
        self.consumed: list[list[Any]] = []
        self.skipped: list[list[str]] = []
        self.samples: dict[str, list[Any]] = {name: [] for name in SAMPLE_COLUMNS}

    def add(self, source: SourceFile, prepared: Prepared) -> None:
        if prepared.data is None:
            self.consumed.append([source.relpath, source.size, source.mtime_ns])
            self.skipped.append([source.relpath, prepared.error or "unknown error"])
            log.warning("pack: skipped %s: %s", source.relpath, self.skipped[-1][1])
            return
        if self.data and self.size + len(prepared.data) > self.shard_size:
            self.flush()
        self.consumed.append([source.relpath, source.size, source.mtime_ns])
        self.data.append(prepared.data)
        self.size += len(prepared.data)
        row = (source.relpath, source.label, 0, len(prepared.data))
        row2 = (prepared.height, prepared.width, prepared.codec, prepared.crc32)
        for name, value in zip(SAMPLE_COLUMNS, row + row2, strict=True):
            self.samples[name].append(value)
        if self.tiles is not None:
            self.tiles.add(prepared)

    def flush(self) -> None:
        """Write the pending records as the next shard, fsync it, then journal it."""
        if not self.data:
            self.tail_skipped.extend(self.skipped)
            self.skipped = []
            return
        shard_id = len(self.records)
        name = f"shard-{shard_id:05d}{self.module.SHARD_SUFFIX}"
        layout = self.module.write_shard(self.staging.dir / name, self.next_sample, self.data)
        self.samples["offset"] = layout.offsets
        size, sha256 = file_digest(self.staging.dir / name)
        info = ShardInfo(name, self.next_sample, len(self.data), size, sha256, layout.data_offset)
        columns = self.tiles.take() if self.tiles is not None else None
        record = ShardRecord(info, self.consumed, self.skipped, self.samples, columns)
        self.staging.commit_shard(record, shard_id)
        self.records.append(record.compact())  # arrays: per-file lists would grow all run
        self.next_sample += len(self.data)
        self._reset()
        self._written_this_run += 1
        if self._kill_after and self._written_this_run >= self._kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    @property
    def all_skipped(self) -> list[list[str]]:
        return [s for r in self.records for s in r.skipped] + self.tail_skipped + self.skipped


def _windows(files: Iterable[SourceFile]) -> Iterator[list[SourceFile]]:
    window: list[SourceFile] = []
    size = 0
    for source in files:
        window.append(source)
        size += source.size
        if size >= _WINDOW_BYTES or len(window) >= _WINDOW_FILES:
            yield window
            window, size = [], 0
    if window:
        yield window


def _prepared(
    root: Path, files: Listing, start: int, workers: int, settings: dict[str, Any]
) -> Iterator[Prepared]:
    """Prepared records of files start.. in order, from a process pool holding at most two
    windows."""
    job: Callable[[str], Prepared] = functools.partial(
        prepare, max_side=settings["max_side"], quality=settings["quality"],
        max_file_size=settings["max_file_size"],
    )
    if settings["tiles"] is not None:
        job = functools.partial(
            tiling.prepare_tiled,
            max_side=settings["max_side"],
            quality=settings["quality"],
            restart_mcus=settings["tiles"]["restart_mcus"],
            max_file_size=settings["max_file_size"],
        )
    top = str(root)  # os.path.join, not Path: a Path per file interns its parts (a dict that
    paths = (os.path.join(top, f.relpath) for f in files.items(start))  # never shrinks)
    if workers == 1 or len(files) - start < 4 * workers:
        yield from map(job, paths)
        return
    import multiprocessing

    with multiprocessing.Pool(workers) as pool:
        pending: deque[Iterable[Prepared]] = deque()
        for window in _windows(files.items(start)):
            chunk = max(1, min(32, len(window) // (4 * workers)))
            pending.append(pool.imap(job, [os.path.join(top, f.relpath) for f in window], chunk))
            if len(pending) > 1:  # keep the next window decoding while this one drains
                yield from pending.popleft()
        while pending:
            yield from pending.popleft()


def _progress_bar(total: int, quiet: bool) -> Any:
    if quiet or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="file",
        unit_scale=True,
        file=sys.stderr,
        smoothing=0.1,
        desc="packing",
        dynamic_ncols=True,
    )


def _build_index(records: list[ShardRecord], tiled: bool) -> dict[str, np.ndarray]:
    """The index arrays of the records' samples. Takes the sample columns out of the records
    (each record's part is freed once joined: never two copies of a column per file)."""
    records[:] = [r.compact() for r in records]  # the samples' columns as arrays

    def column(name: str, dtype: Any) -> np.ndarray:
        return np.concatenate([np.zeros(0, dtype)] + [r.samples.pop(name) for r in records])

    counts = [r.info.count for r in records]
    bases = np.cumsum([0] + [len(r.samples["path_bytes"]) for r in records]).tolist()
    path_offsets = np.zeros(1 + sum(counts), np.int64)
    for r, base, end in zip(records, bases, np.cumsum(counts).tolist(), strict=False):
        path_offsets[end - r.info.count + 1 : end + 1] = r.samples.pop("path_offsets")[1:] + base
    extra = tiling.index_fields([r.tiles for r in records if r.tiles is not None]) if tiled else {}
    return extra | {
        "shard": np.repeat(np.arange(len(records), dtype=np.int32), counts),
        "offset": column("offset", np.int64),
        "length": column("length", np.int64),
        "label": column("label", np.int64),
        "shape": np.stack([column("height", np.int32), column("width", np.int32)], 1),
        "codec": column("codec", np.uint8),
        "crc32": column("crc32", np.uint32),
        "path_offsets": path_offsets,
        "path_bytes": column("path_bytes", np.uint8),
    }


def _stats(result: ScanResult, builder: _ShardBuilder, reencoded: int) -> dict[str, Any]:
    return {
        "files_found": len(result.files),
        "packed": builder.next_sample,
        "skipped": len(builder.all_skipped) + len(result.refused),
        "reencoded": reencoded,
        "ignored_hidden": result.ignored_hidden,
        "ignored_non_image": result.ignored_non_image,
        "ignored_outside_classes": result.ignored_outside_classes,
        "empty_classes": result.empty_classes,
        "source_bytes": result.total_bytes,
        "record_bytes": int(sum(np.sum(r.samples["length"]) for r in builder.records)),
    }


def _fill(
    builder: _ShardBuilder, result: ScanResult, settings: dict[str, Any], progress: Progress | None
) -> int:
    """Prepare and add every file not covered by reused shards; return how many re-encoded."""
    if settings["strict"] and result.refused:  # the scan's refusals count as unreadable files
        path, reason = result.refused[0]
        raise PackError(f"{result.root / path}: {reason}; fix or remove it, or pack without "
                        "--strict to skip (and list) such files.")
    start = sum(r.consumed_count for r in builder.records)
    todo = result.files.items(start)
    bar = _progress_bar(len(result.files), settings["quiet"])
    done_bytes, began, reencoded = int(result.files.sizes[:start].sum()), time.monotonic(), 0
    if bar is not None:
        bar.update(start)
    try:
        stream = _prepared(result.root, result.files, start, settings["workers"], settings)
        for k, (source, prepared) in enumerate(zip(todo, stream, strict=True), start + 1):
            if prepared.data is None and settings["strict"]:
                raise PackError(
                    f"{result.root / source.relpath}: {prepared.error}; fix or remove it, or "
                    "pack without --strict to skip unreadable files."
                )
            builder.add(source, prepared)
            reencoded += prepared.reencoded
            done_bytes += source.size
            if progress is not None:
                progress(k, len(result.files), done_bytes)
            if bar is not None:
                bar.update(1)
                rate = done_bytes / max(time.monotonic() - began, 1e-9) / 1e6
                bar.set_postfix_str(f"{rate:.1f} MB/s", refresh=False)
        builder.flush()
    finally:
        if bar is not None:
            bar.close()
    return reencoded


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
) -> Manifest:
    """Pack the ImageFolder tree at src into a sharded dataset folder dst.

    Records keep the original bytes unless max_side is set and an image is larger (then JPEG at
    quality). Unreadable images are skipped and listed in dst/skipped.json. dst appears only when
    complete (built in a hidden staging folder, renamed last).

    Args:
        src: the image tree, src/<class>/<images> (found recursively; hidden and non-image files
            are ignored).
        dst: the dataset folder to create, NAME.lmdb or NAME.h5.
        format: "lmdb", "hdf5" or None (from dst's suffix).
        shard_size: bytes per shard file.
        workers: processes that read and check images (None: every usable core).
        max_side: re-encode images whose longer side exceeds it, as JPEG; None keeps all bytes.
        quality: the JPEG quality of those re-encodes, 1-100.
        overwrite: replace dst if it is a packed dataset.
        resume: reuse the finished shards of an interrupted pack of the same src and options.
        strict: fail on the first unreadable image instead of skipping it.
        quiet: no progress bar (quiet=False shows tqdm's when stderr is a terminal).
        progress: called as progress(files_done, files_total, bytes_done) after each file.
        tiles: repack JPEGs losslessly as restart-tiled records (decode-aware packing; needs
            the native extension), so crops decode only the segments they cover.
        restart_mcus: with tiles, at most this many MCUs per restart segment.
        max_file_size: files over this many bytes are not read (listed in skipped.json), nor
            is anything that is not a regular file (FIFOs, devices).

    Returns:
        Manifest: what was written (also in dst/manifest.json).

    Raises:
        PackError: a bad source or destination, no decodable image, tiles without the
            extension, or (strict=True) an unreadable image.
        InvalidArgumentError: an option is out of range.
        OSError: the disk filled or a file could not be written (rerun with resume=True).
    """
    shard_size, workers, max_side, quality = _check_options(shard_size, workers, max_side, quality)
    tile_option = tiling.check_tiles_option(tiles, restart_mcus)
    dst_path = Path(dst).expanduser().absolute()
    src_path = Path(src).expanduser().absolute()
    backend = resolve_backend(dst_path, format)
    _check_destination(dst_path, src_path, overwrite)
    max_file_size = int_at_least("max_file_size", max_file_size, 1, "Pass a size in bytes.")
    result = scan(src_path, max_file_size)
    options: dict[str, Any] = {"shard_size": shard_size, "max_side": max_side, "quality": quality}
    if tile_option is not None:  # untiled manifests stay exactly as before
        options["tiles"] = tile_option
    plan = {"backend": backend, "src": str(src_path), "classes": result.classes, **options}
    staging = Staging(dst_path)
    try:
        staging.open(plan, resume)
        tiled = tile_option is not None
        reused = staging.reusable_shards(result.files, tiled)
        builder = _ShardBuilder(staging, backend, shard_size, reused, tiled)
        settings: dict[str, Any] = {"workers": workers, "max_side": max_side, "tiles": tile_option}
        settings |= {"quality": quality, "strict": strict, "quiet": quiet,
                     "max_file_size": max_file_size}
        reencoded = _fill(builder, result, settings, progress)
        if not builder.records:
            raise PackError(
                f"no file under {src_path} could be decoded ({len(result.files)} tried); see "
                "the reasons with --strict, or check the files are images."
            )
        manifest = _finish(staging, builder, result, backend, options, reencoded, overwrite)
    finally:
        staging.release()
    return manifest


def _finish(
    staging: Staging,
    builder: _ShardBuilder,
    result: ScanResult,
    backend: str,
    options: dict[str, Any],
    reencoded: int,
    overwrite: bool,
) -> Manifest:
    from fastloader import __version__

    stats = _stats(result, builder, reencoded)  # before the index takes the records' columns
    arrays = _build_index(builder.records, "tiles" in options)
    fields = index_mod.write_index(staging.dir, arrays)
    refusals = result.refused + builder.all_skipped  # the scan's first: never opened
    skipped = [{"path": path, "reason": reason} for path, reason in refusals]
    (staging.dir / SKIPPED_NAME).write_text(json.dumps(skipped, indent=1) + "\n")
    manifest = Manifest(
        backend=backend,
        num_samples=builder.next_sample,
        classes=result.classes,
        shards=[r.info for r in builder.records],
        fields=fields,
        options=options,
        stats=stats | (tiling.tile_stats(arrays) if "tiles" in options else {}),
        created_by=f"fastloader {__version__}",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    staging.finish(manifest.write, overwrite)
    return manifest


__all__ = ["DEFAULT_SHARD_SIZE", "pack", "resolve_backend", "staging_path"]
