"""Growing datasets: append new samples to a dataset, merge several into one.

Records are copied byte for byte, never decoded: each input shard becomes one output shard (an
HDF5 shard copied whole, its sha256 checked; an LMDB shard rewritten with its records under
their new sample numbers, its key, each record's crc32 checked). Class lists are reconciled
by name: the first dataset's classes keep their ids, each later one's new classes are added
at the end in its order; labels are remapped by name.

append() grows DST in place: the new shards get new file names, the index is written to a new
folder (index-N/), and manifest.json is switched last, atomically. A reader that opened the
old version keeps working (it opened every shard and loaded the index at open; nothing it
uses is changed or removed: the index folder before the old one is removed, never the one in
use). merge() builds OUT in a hidden staging folder renamed into place at the end, like pack.

Tiled (--tiles) and format v2 (declared fields) datasets too, with the same fields and tiling:
their further index columns are carried by grow_fields.ExtraColumns. Inputs sharing class names
get a one-line warning that those classes are joined.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.errors import PackError
from fastloader.format import index as index_mod
from fastloader.format.backends import backend_module
from fastloader.format.dataset import PackedDataset
from fastloader.format.manifest import MANIFEST_NAME, FieldInfo, Manifest, ShardInfo
from fastloader.pack.maintain.grow_fields import ExtraColumns, check_extra, warn_joined
from fastloader.pack.maintain.shard_copy import copy_checked, rekey_lmdb
from fastloader.pack.staging.commit import SKIPPED_NAME
from fastloader.pack.staging.journal import (
    Staging,
    file_digest,
    is_dataset,
    staging_path,
    write_atomic,
)

_LOCK_NAME = ".append.lock"
_INDEX_GEN = re.compile(r"^index(?:-(\d+))?$")


def _open_input(path: Path, what: str) -> PackedDataset:
    """Open a dataset to grow from, refusing the kinds this module cannot combine."""
    if not is_dataset(path):
        raise PackError(f"{what} {path} is not a packed dataset (no {MANIFEST_NAME}); pass a "
                        "folder made by packdata.")
    return PackedDataset(path)


def _check_same(datasets: Sequence[PackedDataset]) -> None:
    first = datasets[0]
    for ds in datasets[1:]:
        if ds.backend != first.backend:
            raise PackError(f"{ds.root} is {ds.backend} but {first.root} is {first.backend}; "
                            "datasets of one backend only: repack one of them with --format.")
        if set(ds.manifest.fields) != set(first.manifest.fields):
            raise PackError(f"{ds.root} has the fields {sorted(ds.manifest.fields)} but "
                            f"{first.root} has {sorted(first.manifest.fields)}; they must match.")
    check_extra(datasets)


def merged_classes(class_lists: Sequence[Sequence[str]]) -> tuple[list[str], list[np.ndarray]]:
    """The union of class names (first seen first) and, per list, old label -> new label."""
    classes: list[str] = []
    ids: dict[str, int] = {}
    maps = []
    for names in class_lists:
        for name in names:
            if name not in ids:
                ids[name] = len(classes)
                classes.append(name)
        maps.append(np.asarray([ids[n] for n in names], np.int64))
    return classes, maps


class _Combined:
    """The output's shards and index columns, built one input shard at a time."""

    def __init__(self, folder: Path, suffix: str, taken: set[str],
                 datasets: Sequence[PackedDataset]) -> None:
        self.folder, self.suffix, self.taken = folder, suffix, set(taken)
        self.extra = ExtraColumns(datasets, merged_classes)
        self.inputs = 0  # inputs taken so far (the next one's number)
        self.shards: list[ShardInfo] = []
        self.columns: dict[str, list[np.ndarray]] = {}
        self.paths: list[str] = []

    @property
    def num_samples(self) -> int:
        return sum(s.count for s in self.shards)

    def _name(self) -> str:
        k = len(self.shards)
        while (name := f"shard-{k:05d}{self.suffix}") in self.taken:
            k += 1
        self.taken.add(name)
        return name

    def _add(self, name: str, value: np.ndarray) -> None:
        self.columns.setdefault(name, []).append(value)

    def keep(self, ds: PackedDataset) -> None:
        """Take ds's shards as they are (append: DST's own, already in place)."""
        self.shards.extend(ds.manifest.shards)
        self._add("shard", np.array(ds.shard_ids))
        self._add("offset", np.array(ds.offsets))
        self._add("label", np.array(ds.labels))
        self._rest(ds, slice(0, len(ds)))
        self.inputs += 1

    def copy(self, ds: PackedDataset, label_map: np.ndarray) -> None:
        """Copy every shard of ds in as new shards, remapping its labels."""
        for k, info in enumerate(ds.manifest.shards):
            name, start, span = self._name(), self.num_samples, slice(info.start, info.stop)
            target = self.folder / name
            if ds.backend == "lmdb":  # re-keyed: new bytes, hashed afresh
                offsets = np.asarray(rekey_lmdb(ds, k, target, start), np.int64)
                size, sha = file_digest(target)
            else:  # the same bytes, their sha256 checked against info on the way
                copy_checked(ds.root / info.file, target, info)
                offsets = np.asarray(ds.offsets[span], np.int64)
                size, sha = info.bytes, info.sha256
            self._add("shard", np.full(info.count, len(self.shards), np.int32))
            self._add("offset", offsets)
            self._add("label", label_map[np.asarray(ds.labels[span])])
            self._rest(ds, span)
            self.shards.append(ShardInfo(name, start, info.count, size, sha, info.data_offset))
        self.inputs += 1

    def _rest(self, ds: PackedDataset, span: slice) -> None:
        for name, values in (("length", ds.lengths), ("shape", ds.shapes),
                             ("codec", ds.codecs), ("crc32", ds.crc32s)):
            self._add(name, np.asarray(values[span]))
        self.paths.extend(ds.paths[span])
        self.extra.add(ds, span, self.inputs)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {name: np.concatenate(parts) for name, parts in self.columns.items()}
        out.update(self.extra.arrays())
        out["path_offsets"], out["path_bytes"] = index_mod.encode_paths(self.paths)
        return out


def _stats(datasets: Sequence[PackedDataset]) -> dict[str, Any]:
    """Counts summed over the inputs (a list, such as empty_classes, joined)."""
    stats: dict[str, Any] = {}
    for ds in datasets:
        for key, value in ds.manifest.stats.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                stats[key] = stats.get(key, 0) + value
            elif isinstance(value, list):
                stats[key] = stats.get(key, []) + value
    return stats


def _skipped(roots: Sequence[Path]) -> list[object]:
    found: list[object] = []
    for root in roots:
        path = root / SKIPPED_NAME
        if path.is_file():
            found.extend(json.loads(path.read_text()))
    return found


def _manifest(datasets: Sequence[PackedDataset], combined: _Combined, classes: list[str],
              fields: dict[str, FieldInfo]) -> Manifest:
    from fastloader import __version__

    first = datasets[0].manifest
    return Manifest(version=first.version, sample_fields=combined.extra.sample_fields,
        backend=first.backend, num_samples=combined.num_samples, classes=classes,
        shards=combined.shards, fields=fields, options=dict(first.options),
        stats=_stats(datasets), created_by=f"fastloader {__version__}",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _resolve(path: str | os.PathLike[str]) -> Path:
    return Path(path).expanduser().absolute()


def merge(
    inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
    overwrite: bool = False,
) -> Manifest:
    """Merge packed datasets into one new dataset, without decoding any record.

    Every sample of every input appears exactly once, in input order; class lists are
    reconciled by name (the first input's ids are kept, later inputs' new names are added at
    the end, their labels remapped). OUT appears only when complete.

    Args:
        inputs: two or more dataset folders of one backend, fields and tiling.
        out: the dataset folder to create.
        overwrite: replace out if it is a packed dataset.

    Returns:
        Manifest: what was written (also in out/manifest.json).

    Raises:
        PackError: fewer than two inputs, an input that is not a dataset, has another
            backend, fields or tiling, or fails its checksums; out exists (without overwrite)
            or is one of the inputs.
        DatasetError: an input is damaged.
    """
    roots = [_resolve(p) for p in inputs]
    dst = _resolve(out)
    if len(roots) < 2:
        raise PackError(f"merge needs two or more datasets, got {len(roots)}; to copy one, "
                        "use cp -r.")
    if dst in roots or not dst.parent.is_dir():
        raise PackError(f"cannot write {dst}: it is one of the inputs or its parent folder does "
                        "not exist; choose another OUT.")
    if (dst.exists() or dst.is_symlink()) and not (overwrite and is_dataset(dst)):
        raise PackError(f"{dst} already exists; pass --overwrite to replace a packed dataset, "
                        "or choose another OUT.")
    datasets: list[PackedDataset] = []
    staging, opened = Staging(dst), False
    try:
        for k, root in enumerate(roots):
            datasets.append(_open_input(root, f"input {k + 1}"))
        _check_same(datasets)
        warn_joined(datasets)
        staging.open({"merge": [str(r) for r in roots]}, resume=False)
        opened = True
        classes, maps = merged_classes([ds.classes for ds in datasets])
        suffix = backend_module(datasets[0].backend).SHARD_SUFFIX
        combined = _Combined(staging.dir, suffix, set(), datasets)
        for ds, label_map in zip(datasets, maps, strict=True):
            combined.copy(ds, label_map)
        fields = index_mod.write_index(staging.dir, combined.arrays())
        write_atomic(staging.dir / SKIPPED_NAME, json.dumps(_skipped(roots), indent=1))
        manifest = _manifest(datasets, combined, classes, fields)
        staging.finish(manifest.write, overwrite)
    except BaseException:
        if opened:  # a merge has nothing to resume: leave no staging folder behind
            shutil.rmtree(staging.dir, ignore_errors=True)
        raise
    finally:
        staging.release()
        for ds in datasets:
            ds.close()
    return manifest


@contextlib.contextmanager
def _append_lock(root: Path) -> Iterator[None]:
    fd = os.open(root / _LOCK_NAME, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PackError(f"another packdata append is writing {root} right now; wait for it "
                            "to finish.") from None
        yield
    finally:
        os.close(fd)


def _index_generations(root: Path) -> dict[int, Path]:
    gens = {}
    for entry in root.iterdir():
        match = _INDEX_GEN.match(entry.name)
        if match and entry.is_dir():
            gens[int(match.group(1) or 0)] = entry
    return gens


def _append_into(root: Path, new_roots: Sequence[Path]) -> Manifest:
    """Append the datasets at new_roots to the dataset at root, in place."""
    datasets = [_open_input(root, "DST")]
    try:
        for k, path in enumerate(new_roots):
            datasets.append(_open_input(path, f"source {k + 1}"))
        _check_same(datasets)
        warn_joined(datasets)
        base = datasets[0]
        classes, maps = merged_classes([ds.classes for ds in datasets])
        suffix = backend_module(base.backend).SHARD_SUFFIX
        combined = _Combined(root, suffix, {s.file for s in base.manifest.shards}, datasets)
        combined.keep(base)
        for ds, label_map in zip(datasets[1:], maps[1:], strict=True):
            combined.copy(ds, label_map)
        gens = _index_generations(root)
        current = {f.file.split("/")[0] for f in base.manifest.fields.values()}
        gen = max(gens, default=0) + 1
        folder = root / f"index-{gen}"
        shutil.rmtree(folder, ignore_errors=True)  # a crashed append's leftover
        fields = index_mod.write_index(folder, combined.arrays())
        for info in fields.values():  # write_index names them relative to `folder`
            info.file = f"{folder.name}/{info.file}"
        manifest = _manifest(datasets, combined, classes, fields)
        write_atomic(root / SKIPPED_NAME, json.dumps(_skipped([root, *new_roots]),
                                                          indent=1))
        manifest.write(root)  # the switch: readers opening from now on see the new version
        for path in gens.values():  # keep the version just replaced for its readers
            if path.name not in current:
                shutil.rmtree(path, ignore_errors=True)
        return manifest
    finally:
        for ds in datasets:
            ds.close()


def _as_v1(folder: Path) -> None:
    """A tree's pack (image + label, format v2) in the layout of the format v1 dataset it is
    appended to (the same shards and core index arrays; no label column, no sample_fields):
    a v1 dataset grows in its own format."""
    from fastloader.format.fields import specs_from_manifest
    from fastloader.format.manifest import read_manifest

    manifest = read_manifest(folder)
    label = specs_from_manifest(manifest.sample_fields, str(folder))[1]
    for name in label.arrays().values():  # its column: the core label array holds it too
        (folder / manifest.fields.pop(name).file).unlink()
    manifest.version, manifest.sample_fields = 1, []
    manifest.stats.pop("skipped_samples", None)
    manifest.write(folder)


def append(
    dst: str | os.PathLike[str], new: str | os.PathLike[str], **pack_options: Any
) -> Manifest:
    """Append the samples of new to the packed dataset dst, in place, without re-decoding dst.

    new is a packed dataset (its shards are copied in) or an image tree (packed first, with
    dst's backend, shard size, max_side and quality unless pack_options say otherwise). New
    samples become new shards after dst's; dst's class ids never change, new class names are
    added at the end. manifest.json is switched last, atomically: readers that opened dst
    before keep reading the version they opened.

    Args:
        dst: a dataset folder (tiled or with declared fields too).
        new: a packed dataset folder or an ImageFolder tree.
        **pack_options: for an image tree: options of fastloader.pack.pipeline.tree.pack
            (workers, quiet, skip_bad, max_file_size, ...).

    Returns:
        Manifest: the new manifest of dst.

    Raises:
        PackError: dst is not a dataset; new has another backend, fields or tiling, fails
            its checksums, or is an image tree with no decodable image; another
            append is writing dst.
        DatasetError: dst or new is damaged.
    """
    from fastloader.format.manifest import read_manifest
    from fastloader.pack.pipeline.tree import pack

    root, source = _resolve(dst), _resolve(new)
    if not is_dataset(root):
        raise PackError(f"{root} is not a packed dataset (no {MANIFEST_NAME}); create it with "
                        f"`packdata {source} {root}` instead.")
    if source == root:
        raise PackError(f"cannot append {root} to itself.")
    with _append_lock(root):
        if is_dataset(source):
            return _append_into(root, [source])
        current = read_manifest(root)
        settings: dict[str, Any] = {"format": current.backend, "quiet": True,
                                    "overwrite": True}
        settings |= {k: current.options[k] for k in ("shard_size", "max_side", "quality")
                     if k in current.options}
        settings |= pack_options
        temp = root.parent / f".{root.name}.append-{os.getpid()}"
        try:
            pack(source, temp, **settings)
            if current.version == 1:  # dst was packed by an earlier fastloader
                _as_v1(temp)
            return _append_into(root, [temp])
        finally:  # the packed copy, or what a failed pack of it left
            shutil.rmtree(temp, ignore_errors=True)
            shutil.rmtree(staging_path(temp), ignore_errors=True)
