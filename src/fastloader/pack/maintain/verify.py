"""verify(): check a packed dataset's files, index and every record (optionally decode them)."""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fastloader.decode import coeffs
from fastloader.errors import DatasetError
from fastloader.format import index as index_mod
from fastloader.format.dataset import PackedDataset
from fastloader.format.kinds import EncodedImage
from fastloader.format.manifest import Codec, Manifest, member_path, read_manifest
from fastloader.pack.maintain import verify_tiles
from fastloader.pack.maintain.verify_fields import check_fields
from fastloader.pack.staging.journal import sha256_file


@dataclass
class VerifyReport:
    """What verify found: problems with files/index, and each bad record by index."""

    root: Path
    records_checked: int = 0
    problems: list[str] = field(default_factory=list)
    bad_records: list[int] = field(default_factory=list)
    tiles_checked: int = 0  # tiled records whose table (and, with decode, a crop) was checked
    tiles_unchecked: str = ""  # why tile checks could not run, "" when they did or none exist
    sources_compared: int = 0  # tiled records compared pixel for pixel with their source
    sources_unavailable: int = 0  # ... whose source was gone, changed or re-encoded
    values_checked: int = 0  # v2: text/json/image field values read back (verify_fields.py)

    @property
    def ok(self) -> bool:
        return not self.problems


def _member(root: Path, name: str, what: str, report: VerifyReport) -> Path | None:
    """root/name when it is a regular file inside the dataset, else None and a problem."""
    if not os.path.lexists(root / name):
        report.problems.append(f"{what}: file is missing")
        return None
    try:
        return member_path(root, name)
    except DatasetError as exc:
        report.problems.append(f"{what}: {exc}")
        return None


def _check_fields(root: Path, manifest: Manifest, report: VerifyReport) -> None:
    for name, info in sorted(manifest.fields.items()):
        path = _member(root, info.file, f"index field {name!r}", report)
        if path is not None and sha256_file(path)[1] != info.sha256:
            report.problems.append(f"index field {name!r}: {info.file} fails its sha256 check")
    for name in index_mod.CORE_FIELDS:
        if name not in manifest.fields:
            report.problems.append(f"index field {name!r} is not listed in manifest.json")


def _check_shards(root: Path, manifest: Manifest, report: VerifyReport) -> set[int]:
    """Check every shard file; return the shards whose bytes differ from what was packed."""
    expected_start = 0
    damaged: set[int] = set()
    for k, shard in enumerate(manifest.shards):
        where = f"shard {k} ({shard.file!r})"
        if shard.start != expected_start or shard.count < 1:
            report.problems.append(
                f"{where}: covers samples {shard.start}..{shard.stop - 1}, "
                f"expected to start at {expected_start}"
            )
        expected_start = shard.stop
        path = _member(root, shard.file, where, report)
        if path is None:
            damaged.add(k)
            continue
        size, sha256 = sha256_file(path)
        if size != shard.bytes:
            report.problems.append(f"{where}: {size} bytes on disk, manifest says {shard.bytes}")
        if sha256 != shard.sha256:
            report.problems.append(f"{where}: fails its sha256 check (the file was changed)")
            damaged.add(k)
        if manifest.backend == "hdf5":
            _check_hdf5_offset(path, shard.data_offset, where, report)
    if expected_start != manifest.num_samples:
        report.problems.append(
            f"shards cover {expected_start} samples, manifest says {manifest.num_samples}"
        )
    return damaged


def _check_hdf5_offset(path: Path, stored: int | None, where: str, report: VerifyReport) -> None:
    from fastloader.format.hdf5 import records_file_offset

    try:
        actual = records_file_offset(path)
    except Exception as exc:  # h5py raises OSError/KeyError/... for damaged files
        report.problems.append(f"{where}: h5py cannot read it ({type(exc).__name__}: {exc})")
        return
    if actual != stored:
        report.problems.append(
            f"{where}: records start at file offset {actual}, manifest says {stored}"
        )


def _check_index(ds: PackedDataset, report: VerifyReport) -> None:
    """Index arrays agree with the manifest: shard ranges, label range, codecs, paths."""
    for k, shard in enumerate(ds.manifest.shards):
        ids = ds.shard_ids[shard.start : shard.stop]
        if np.any(ids != k):
            report.problems.append(
                f"index: samples {shard.start}..{shard.stop - 1} not all in shard {k}"
            )
    classes = max(len(ds.classes), 1 if ds.manifest.version >= 2 else 0)  # v2: 0 if unlabelled
    bad_label = np.flatnonzero((ds.labels < 0) | (ds.labels >= classes))
    bad_length = np.flatnonzero(ds.lengths <= 0)
    bad_codec = np.flatnonzero(ds.codecs > max(Codec))
    for what, where in (("label", bad_label), ("length", bad_length), ("codec", bad_codec)):
        for i in where[:20].tolist():
            report.problems.append(f"{_name(ds, i)}: invalid {what} in the index")
        report.bad_records.extend(where.tolist())


def _name(ds: PackedDataset, i: int) -> str:
    try:
        return f"record {i} (shard {ds.shard_file(i)!r}, source {ds.path(i)!r})"
    except Exception:  # a damaged index must not stop the report
        return f"record {i}"


Source = tuple[Path, np.ndarray]  # (packed image tree, source_crc32 index field)


def _check_record(
    ds: PackedDataset, i: int, decode: bool, report: VerifyReport, source: Source | None
) -> str | None:
    """Why record i is bad, or None when it is intact."""
    try:
        data = ds.record(i)
    except Exception as exc:  # CorruptRecordError, or an LMDB error on a damaged page
        return f"cannot be read ({type(exc).__name__})"
    if zlib.crc32(data) != int(ds.crc32s[i]):
        return "crc32 mismatch: the stored bytes changed"
    problem = _codec_problem(data, int(ds.codecs[i]))
    if problem is not None:
        return problem
    problem = (_decode_problem(ds, data, tuple(int(v) for v in ds.stored_shapes[i])) if decode
               else None)
    if problem is None and ds.tiled and not report.tiles_unchecked:
        problem = _tile_problem(ds, i, data, decode, report, source)
    return problem


def _codec_problem(data: memoryview, codec: int) -> str | None:
    """The codec column against the record's first bytes: a coeffs record (its magic) must be
    marked COEFFS and a COEFFS mark must hold one; a JPEG mark, a JPEG's SOI marker."""
    is_record = coeffs.is_coeffs(data)
    if is_record == (codec == Codec.COEFFS) and (
            codec != Codec.JPEG or bytes(data[:2]) == b"\xff\xd8"):
        return None
    jpeg = bytes(data[:2]) == b"\xff\xd8"
    held = ("a coeffs record" if is_record else "JPEG bytes" if jpeg
            else "neither a JPEG nor a coeffs record")
    name = Codec(codec).name if codec <= max(Codec) else str(codec)  # _check_index: the rest
    return (f"the index marks it {name} but it holds {held}; repack the dataset (or `packdata "
            "recode` it from a good copy)")


def _tile_problem(
    ds: PackedDataset, i: int, data: memoryview, decode: bool, report: VerifyReport,
    source: Source | None,
) -> str | None:  # fmt: skip
    try:
        table = ds.tile_table(i)
    except DatasetError as exc:
        return str(exc)
    if table is None:
        return None
    report.tiles_checked += 1
    problem = verify_tiles.table_problem(data, table)
    if problem is None and decode:
        problem = verify_tiles.decode_problem(data, table, seed=i)
    if problem is None and decode and source is not None:
        crc = int(source[1][i])
        compared, problem = verify_tiles.source_problem(data, source[0] / ds.path(i), crc)
        report.sources_compared += compared
        report.sources_unavailable += not compared
    return problem


def _decode_problem(ds: PackedDataset, data: memoryview, shape: tuple[int, ...]) -> str | None:
    """Decode as the loader does: an image with the loader's image decoder (the kind's
    decode_problem); records of another kind (audio) by their kind."""
    spec = ds.fields[ds.image_field]
    size = (shape[0], shape[1])
    if isinstance(spec.kind, EncodedImage):
        return spec.kind.decode_problem(data, size)
    return spec.kind.verify(spec, bytes(data), size, lambda _: None)


def _isolated_problems(
    ds: PackedDataset, shards: set[int], decode: bool
) -> dict[int, dict[int, str | None]]:
    """Check the records of changed LMDB shards in a forked child: LMDB follows page numbers
    stored in the file, and a changed one may point past the file's end (SIGBUS). A child that
    dies marks all its shard's records bad; the parent lives to report it."""
    found: dict[int, dict[int, str | None]] = {}
    report = VerifyReport(ds.root)
    report.tiles_unchecked = "not in a damaged shard"
    for shard in sorted(shards):
        info = ds.manifest.shards[shard]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: check, send the verdicts, leave without cleanup
            os.close(read)
            try:
                verdicts = {i: _check_record(ds, i, decode, report, None)
                            for i in range(info.start, info.stop)}
                with os.fdopen(write, "w") as out:
                    json.dump(verdicts, out)
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            text = pipe.read()
        _, status = os.waitpid(pid, 0)
        try:
            found[shard] = {int(k): v for k, v in json.loads(text).items()}
        except ValueError:
            why = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"exit {os.waitstatus_to_exitcode(status)}")
            problem = f"reading its damaged LMDB shard kills the reader ({why}): not readable"
            found[shard] = {i: problem for i in range(info.start, info.stop)}
    return found


def verify(
    path: str | os.PathLike[str],
    decode: bool = False,
    progress: Callable[[int, int], None] | None = None,
    source: str | os.PathLike[str] | None = None,
) -> VerifyReport:
    """Check manifest, index files, shard files (size, sha256) and every record's crc32.

    decode=True also decodes every record with the loader's own decoder and checks its size.
    On a tiled dataset it also checks each tiled record's table against its bytes, a spliced
    crop against the full decode and, with source (the packed image tree), the pixels against
    the source file (see maintain/verify_tiles.py). Raises DatasetNotFoundError when path is not a
    dataset;
    otherwise reports all it finds.
    """
    root = Path(path).expanduser().absolute()
    source_root = Path(source).expanduser().absolute() if source is not None else None
    manifest = read_manifest(root)
    report = VerifyReport(root)
    if "tiles" in manifest.options and not verify_tiles.native_available():
        report.tiles_unchecked = "tile checks need the native extension (not available)"
    _check_fields(root, manifest, report)
    damaged = _check_shards(root, manifest, report)
    try:
        ds = PackedDataset(root, check_sha256=False)  # _check_fields reported edited files
    except DatasetError as exc:
        report.problems.append(f"index cannot be loaded: {exc}")
        return report
    with ds:
        _check_index(ds, report)
        tree = None
        if source_root is not None and ds.tiled:
            tree = (source_root, ds.field("source_crc32"))
        isolated = _isolated_problems(ds, damaged, decode) if ds.backend == "lmdb" else {}
        for i in range(len(ds)):
            if int(ds.shard_ids[i]) in isolated:
                problem = isolated[int(ds.shard_ids[i])].get(i)
            else:
                problem = _check_record(ds, i, decode, report, tree)
            if problem is not None:
                report.problems.append(f"{_name(ds, i)}: {problem}")
                report.bad_records.append(i)
            report.records_checked += 1
            if progress is not None:
                progress(i + 1, len(ds))
        report.values_checked = check_fields(ds, report, decode)
    return report
