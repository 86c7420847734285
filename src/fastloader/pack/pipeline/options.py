"""A pack's options: one typed object, checked in full before any file is read or written.

PackOptions holds what fastloader.pack() and packdata take for every source (the source's own
arguments, an importer's image/label/root or Python samples' fields, stay with the source);
`checked()` validates every value at once and resolves the defaults (workers, tiles), so a bad
option never leaves a staging folder behind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from fastloader.checks import int_at_least
from fastloader.decode.tiles import DEFAULT_RESTART_MCUS
from fastloader.errors import PackError, invalid_argument, invalid_type
from fastloader.format.backends import backend_for_suffix
from fastloader.format.manifest import BACKENDS
from fastloader.format.remote import is_url
from fastloader.pack.engines.progress import Progress
from fastloader.pack.sources import tiling
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE
from fastloader.pack.staging.journal import is_dataset

DEFAULT_SHARD_SIZE = 256 << 20
ENGINES = ("local", "ray")
CODECS = ("jpeg", "coeffs", "tiles")
# PackOptions fields plan.json does not keep, and why (tests/test_pack_options_declared.py
# fails when a field is in neither this nor plan_entries()): how this run goes, not what the
# parts hold. skip_bad and overwrite travel in plan/settings.json where a source puts them.
RUN_ONLY = {
    "format": "resolved into the plan's backend",
    "workers": "this run's processes", "resume": "this run's choice", "quiet": "this run's",
    "progress": "this run's callback", "strict": "the default (not skip_bad)",
    "engine": "who runs the tasks: the same parts either way",
    "ray_address": "who runs the tasks", "storage_options": "secrets: never saved",
    "overwrite": "plan/settings.json", "skip_bad": "a source puts it in plan.json or "
    "plan/settings.json", "restart_mcus": "inside plan.json's tiles entry",
    "shard_samples": "Python samples' plans only (samples.py adds it)",
    "skip_space_check": "this run's check of the free space before it starts",
}


@dataclass(frozen=True)
class PackOptions:
    """How to pack, for every source; `checked()` before use. Each option (the words of an
    ImageFolder tree's; fastloader.pack says what differs for other sources):

    Attributes:
        format: "lmdb", "hdf5" or None (from dst's suffix).
        shard_size: bytes per shard file.
        workers: processes that read and check images (None: every usable core); with
            engine="ray" and no cluster, the CPUs of the local Ray instance.
        max_side: re-encode images whose longer side exceeds it, as JPEG; None keeps all bytes.
        quality: the JPEG quality of those re-encodes, 1-100.
        overwrite: replace dst if it is a packed dataset.
        resume: reuse the finished shards of an interrupted pack of the same src and options
            (each one only if its files are unchanged).
        strict: stop at the first unreadable image (the default, said explicitly).
        skip_bad: skip unreadable images (and files the scan refuses) and list them in
            skipped.json, instead of stopping at the first.
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
        shard_samples: Python samples only: samples a shard (None: shard_size / 128 KiB).
        apply_exif_orientation: store each image's EXIF orientation (as
            PIL.ImageOps.exif_transpose reads it) in the index, and its size as the turned
            image's; records keep their bytes. FastLoader then shows the turned images.
        codec: how JPEG records are stored: "jpeg" (as they are), "coeffs" (each JPEG's
            coefficients as a coeffs record, encoded where the item is prepared; needs the
            native extension; other images, and JPEGs records do not hold, keep their bytes)
            or "tiles" (= tiles=True; `checked()` turns it into that).
        skip_space_check: pack even when the output's estimate (from the plan's size hints)
            is clearly larger than the free space where dst goes, which is refused otherwise
            (PackDiskFullError). A disk that fills mid-way is the same error either way, and
            the finished shards are kept for resume.
    """

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
    apply_exif_orientation: bool = False
    codec: str = "jpeg"
    skip_space_check: bool = False

    def checked(self) -> PackOptions:
        """These options with every value checked and workers resolved (None: every usable
        core); PackError or InvalidArgumentError naming the first bad one."""
        shard_size, workers, max_side, quality = check_sizes(
            self.shard_size, self.workers, self.max_side, self.quality)
        for name in ("overwrite", "resume", "strict", "skip_bad", "quiet", "tiles",
                     "apply_exif_orientation", "skip_space_check"):
            if not isinstance(getattr(self, name), bool):
                raise invalid_type(name, getattr(self, name), "a bool")
        if self.strict and self.skip_bad:
            raise PackError("strict=True and skip_bad=True contradict each other: "
                            "the first stops at the first bad item (the default), the second "
                            "packs the rest and lists them in skipped.json; pass one.")
        check_engine(self.engine, self.ray_address)
        tiles = check_codec(self.codec, self.tiles)
        if self.codec == "coeffs" and self.apply_exif_orientation:
            raise PackError("codec='coeffs' with apply_exif_orientation=True: coeffs records "
                            "are decoded as stored, "
                            "not turned; pack with codec='jpeg' to turn the images, or drop "
                            "apply_exif_orientation=True to store them as they are.")
        tiling.check_tiles_option(tiles, self.restart_mcus)
        max_file_size = int_at_least("max_file_size", self.max_file_size, 1,
                                     "Pass a size in bytes.")
        if self.storage_options is not None and not isinstance(self.storage_options, dict):
            raise invalid_type("storage_options", self.storage_options, "a dict or None")
        return replace(self, shard_size=shard_size, workers=workers, max_side=max_side,
                       quality=quality, max_file_size=max_file_size, tiles=tiles,
                       codec="jpeg" if self.codec == "tiles" else self.codec)

    def with_values(self, values: Mapping[str, Any], skip_bad: bool = False
                    ) -> PackOptions:
        """These options with pack()'s keyword options (and skip_bad=True) set on top;
        PackError naming an unknown one."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise PackError(f"unknown pack option(s) {', '.join(unknown)}; the options are "
                            f"{', '.join(sorted(names))} (see fastloader.pack's docstring).")
        chosen: PackOptions = replace(self, **values)
        return replace(chosen, skip_bad=True) if skip_bad else chosen

    def plan_entries(self) -> dict[str, object]:
        """plan.json's entries of these checked options, the one place they are written
        (staging/plan.TaskSettings reads them back): the sizes and the JPEG quality, then the
        options a plain pack leaves out, each only when set, so every other plan stays
        exactly as before: tiles, --apply-exif-orientation, a codec other than "jpeg"."""
        entries: dict[str, object] = {
            "shard_size": self.shard_size, "max_side": self.max_side,
            "quality": self.quality, "max_file_size": self.max_file_size}
        if self.tiles:  # the manifest's tiles entry; checked() has checked restart_mcus
            entries["tiles"] = {"version": tiling.TILES_VERSION,
                                "restart_mcus": self.restart_mcus}
        if self.apply_exif_orientation:
            entries["apply_exif_orientation"] = True
        if self.codec != "jpeg":
            entries["codec"] = self.codec
        return entries


def check_codec(codec: object, tiles: bool) -> bool:
    """codec is one of CODECS, coeffs only without tiles and with the encoder built; whether
    the pack is tiled (codec "tiles" is tiles=True)."""
    if codec not in CODECS:
        raise PackError(f"codec={codec!r} is not one of {CODECS} ('jpeg', the default, keeps "
                        "the bytes as they are).")
    if codec == "coeffs" and tiles:
        raise PackError("codec='coeffs' and tiles=True contradict "
                        "each other: coeffs records already crop without decoding the rows "
                        "above; pass one.")
    if codec == "coeffs":
        from fastloader.decode import coeffs

        if coeffs.native_reason():
            raise PackError(f"codec='coeffs' cannot pack: {coeffs.native_reason()}")
    return tiles or codec == "tiles"


def check_sizes(
    shard_size: object, workers: object, max_side: object, quality: object
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
                "NAME.lmdb or NAME.h5, or pass format='lmdb' or format='hdf5'."
            )
        return from_suffix
    chosen = {"h5": "hdf5"}.get(format.lower(), format.lower())
    if chosen not in BACKENDS:
        raise PackError(f"unknown format {format!r} for {dst}; choose lmdb or hdf5.")
    if from_suffix is not None and from_suffix != chosen:
        raise PackError(
            f"{dst} has the {from_suffix} suffix {Path(dst).suffix!r} but format {format!r} was "
            "asked; "
            "make the suffix and format= agree."
        )
    return chosen


def refuse_inside(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """PackError when DST lies inside SRC (checked before SRC is read: a source listed with
    its own destination inside would pack it, or find it empty)."""
    if is_url(src) or is_url(dst):
        top, target = str(src), str(dst)
        inside = is_url(src) and target.startswith(top.rstrip("/") + "/")
    else:
        top_path, target_path = (Path(p).expanduser().absolute() for p in (src, dst))
        inside = target_path == top_path or top_path in target_path.parents
        top, target = str(top_path), str(target_path)
    if inside:
        raise PackError(f"DST {target} is inside SRC {top}; write the dataset outside the "
                        "source.")


def check_destination(dst: Path, src: Path | str, overwrite: bool) -> None:
    """PackError unless dst can be created (or, with overwrite, replaced) outside src."""
    if not dst.parent.is_dir():
        raise PackError(
            f"cannot create {dst}: its parent folder {dst.parent} does not exist; create it "
            "first or choose another DST."
        )
    refuse_inside(src, dst)
    if not (dst.exists() or dst.is_symlink()):
        return
    if not overwrite:
        raise PackError(
            f"{dst} already exists; pass overwrite=True to replace it or choose another DST."
        )
    empty_dir = dst.is_dir() and not any(dst.iterdir())
    if not (is_dataset(dst) or empty_dir):
        raise PackError(
            f"{dst} exists and is not a packed dataset, so overwrite=True will not delete it; "
            "remove it yourself or choose another DST."
        )


def check_engine(engine: object, ray_address: object) -> None:
    """engine is "local" or "ray"; ray_address only with "ray"."""
    if engine not in ENGINES:
        raise invalid_argument("engine", engine, f"must be one of {ENGINES}",
                               "Pass 'local' (this machine's processes) or 'ray'.")
    if ray_address is not None and engine != "ray":
        raise PackError("ray_address= needs engine='ray'.")
