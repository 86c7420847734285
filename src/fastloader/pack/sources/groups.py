"""File-group importer, WebDataset's convention: files sharing a basename are one sample.

From a folder tree (x.jpg, x.cls, x.txt ...) or from WebDataset .tar shards (a brace pattern
like data-{000..009}.tar too; local, or at fsspec URLs: s3://bucket/train-{000..099}.tar).
The key is the path up to the first dot of the file name; the rest is the extension, which
names the field (jpg, cls, txt, json, npy, as in WebDataset).
Kinds by extension: jpg/jpeg/png/webp/bmp image, cls int, txt text, json json, npy ndarray
(any shape: declare it with fields= / --field EXT:ndarray:DTYPE:SHAPE), flac/wav/mp3/ogg/opus
audio, mp4/m4v/mov/mkv/webm/avi video (decode/video.py's VIDEO_EXTENSIONS), anything else
bytes.
A folder's fields are every extension found; a tar's those of its first samples. Tars are
indexed by one walk of their headers (pack/sources/tar_index.py) and read by sample, in any order.
A member (or file) named KEY.EXT.gz is un-gzipped when read, as WebDataset does: the field
keeps WebDataset's name (EXT.gz) and is of EXT's kind, stored decompressed. Shards may be
gzipped (.tgz, .tar.gz: see tar_index.py).
Boxes and masks: a `.mask.png` member is the field `mask`, a `.boxes.json` member becomes the
fields `boxes` (+ `box_labels`, `iscrowd`), as pack/sources/spatial.py says.
"""

from __future__ import annotations

import dataclasses
import gzip
import operator
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import SupportsIndex, cast

import numpy as np

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec, check_specs, make_spec
from fastloader.format.kinds import (
    BYTES,
    IMAGE,
    INT,
    JSON,
    NDARRAY,
    TEXT,
    EncodedImage,
    Kind,
    encoded_kinds,
    find,
)
from fastloader.format.remote import is_url
from fastloader.pack.sources import spatial
from fastloader.pack.sources.tar_index import TarIndex
from fastloader.pack.sources.types import Description, FieldKinds, Sample, StorageOptions
from fastloader.pack.sources.values import ERROR_KEY, PATH_KEY, WHERE_KEY, TarMember

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp")
_KINDS: dict[str, Kind] = {"cls": INT, "txt": TEXT, "json": JSON, "npy": NDARRAY}


def _kind_of_extension(extension: str) -> Kind:
    """The kind of a member with this extension: WebDataset's own, else the registered kind of
    encoded files whose extensions it is (.flac, .mp4 ...), else bytes."""
    found = _KINDS.get(extension)
    if found is not None:
        return found
    suffix = "." + extension
    return next((kind for kind in encoded_kinds() if suffix in kind.extensions), BYTES)
_PEEK = 64  # tar samples read ahead to find the fields


def expand_braces(pattern: str) -> list[str]:
    """'data-{000..002}.tar' -> data-000.tar, data-001.tar, data-002.tar; '{a,b}' too."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail, body = pattern[: match.start()], pattern[match.end():], match.group(1)
    span = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if span:
        first, last = span.groups()
        width = len(first) if first.startswith("0") else 0
        items = [str(k).zfill(width) for k in range(int(first), int(last) + 1)]
    else:
        items = body.split(",")
    return [name for item in items for name in expand_braces(head + item + tail)]


def split_key(name: str) -> tuple[str, str]:
    """'a/b/x.seg.png' -> ('a/b/x', 'seg.png'): WebDataset's key and extension."""
    folder, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def _plain_ext(ext: str) -> str:
    """What a gzipped member holds: 'txt.gz' -> 'txt' (its field keeps WebDataset's name,
    txt.gz, with the kind and the decompressed bytes of a txt)."""
    return ext[:-3] if ext.endswith(".gz") else ext


def _gunzipped(ext: str, data: bytes) -> bytes:
    """A member's bytes, un-gzipped when its name ends in .gz (stored decompressed)."""
    return gzip.decompress(data) if ext.endswith(".gz") else data


def _is_image(ext: str) -> bool:
    return ext.rpartition(".")[2] in IMAGE_EXTENSIONS


def _kind(ext: str) -> Kind:
    inner = _plain_ext(ext)
    return IMAGE if _is_image(inner) else _kind_of_extension(inner.rpartition(".")[2])


def _specs(exts: list[str], overrides: dict[str, object], where: str) -> list[FieldSpec]:
    unknown = set(overrides) - set(exts)
    if unknown:
        raise PackError(f"{where}: fields= names {sorted(unknown)}, extensions no sample has "
                        f"(found {exts}).")
    specs = []
    for ext in exts:
        spec = overrides.get(ext) or spatial.default_kind(ext, exts) or _kind(ext)
        named = find(spec)
        if named is not None:  # a bare name: an ndarray's dtype and ndim are its first value's
            spec = named.bare()
        specs.append(make_spec(ext, spec, PackError, where))
    images = sorted((s for s in specs if isinstance(s.kind, EncodedImage)),
                    key=lambda s: not _is_image(s.name) or s.name not in ("jpg", "jpeg"))
    rest = [s for s in specs if not isinstance(s.kind, EncodedImage)]
    specs = spatial.with_per_box(images + rest)  # a jpg first: the fused-decode records
    check_specs(specs, PackError, where)
    return specs


def _sample(key: str, members: dict[str, object], specs: list[FieldSpec], where: str,
            read: Callable[[object], bytes]) -> Sample:
    if isinstance(members.get(ERROR_KEY), str):  # a malformed .boxes.json
        return {WHERE_KEY: where, ERROR_KEY: members[ERROR_KEY]}
    sample: Sample = {WHERE_KEY: where, PATH_KEY: key}
    for ext, member in members.items():
        spec = next((s for s in specs if s.name == ext), None)
        if spec is None:
            return {WHERE_KEY: where, ERROR_KEY: f"has field {ext!r} ({key}.{ext}), which the "
                    "first samples do not have; declare it with fields= or remove it"}
        try:
            if isinstance(member, spatial.Parsed):
                sample[ext] = spatial.typed(member.value, spec)
            else:  # a path or tar member may be read by the pool worker (images, masks)
                sample[ext] = spec.kind.from_member(spec, member, read,
                                                    isinstance(member, (Path, TarMember)))
        except (ValueError, UnicodeDecodeError) as exc:
            return {WHERE_KEY: f"{where}.{ext}", ERROR_KEY:
                    f"field {ext!r} ({spec.kind}): cannot be read ({exc})"}
    return sample


def _fit_ndarrays(specs: list[FieldSpec], first: list[Sample]) -> list[FieldSpec]:
    """An undeclared npy field takes the dtype of its first value, every dim variable."""
    out = []
    for spec in specs:
        if spec.is_array and spec.shape == (-1,):
            value = next((v for s in first if isinstance(v := s.get(spec.name), np.ndarray)),
                         None)
            if value is not None:
                spec = dataclasses.replace(spec, dtype=str(value.dtype), shape=(-1,) * value.ndim)
        out.append(spec)
    return out


def open_folder(path: Path, fields: FieldKinds | None
                ) -> tuple[list[Sample], list[FieldSpec], Description]:
    """(samples, fields, source) of a folder of file groups."""
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in
                                              p.relative_to(path).parts))
    groups: dict[str, dict[str, object]] = {}
    for name in files:
        key, ext = split_key(name)
        group = groups.setdefault(key, {})
        if not ext.endswith(".gz"):
            group[ext] = path / name
            continue
        try:  # read now: its stored value is the decompressed bytes
            group[ext] = gzip.decompress((path / name).read_bytes())
        except (OSError, EOFError) as exc:
            group[ERROR_KEY] = f"{name} is not readable gzip ({exc})"

    def read(value: object) -> bytes:  # a folder's members: decompressed bytes, or paths
        return value if isinstance(value, bytes) else Path(cast(Path, value)).read_bytes()

    groups = {key: spatial.expand_group(group, read) for key, group in groups.items()}
    exts = sorted({ext for group in groups.values() for ext in group if ext != ERROR_KEY})
    specs = _specs(exts, dict(fields or {}), str(path))
    samples = [_sample(key, members, specs, f"{path}/{key}", read)
               for key, members in groups.items()]
    specs = _fit_ndarrays(specs, samples[:_PEEK])
    return samples, specs, {"kind": "files", "path": str(path)}


def _already_read(data: object) -> bytes:
    """A tar group's member, read with its group: its bytes as they are."""
    return cast(bytes, data)


# a group as TarSamples.group() finds it: (where, key, its members), or its error sample
Found = Sample | tuple[str, str, dict[str, object]]


class TarSamples(Sequence[Sample]):
    """The samples of WebDataset .tar shards by index, in tar order, from a TarIndex (one
    header walk). sample k reads its group's non-image members by offset in the calling
    process (each process opens its own file descriptors); image members stay TarMember refs,
    read by the pool worker that checks them (at a URL, sample k reads its whole group in one
    request, images included). Picklable and cheap to fork."""

    def __init__(self, index: TarIndex, specs: list[FieldSpec]) -> None:
        self.tar_index = index
        self.specs = specs

    def __len__(self) -> int:
        return len(self.tar_index)

    def __getitem__(self, k: SupportsIndex) -> Sample:  # type: ignore[override]  # no slices
        k = operator.index(k)
        if not -len(self) <= k < len(self):
            raise IndexError(f"sample {k} of {len(self)}")
        k %= len(self)
        return self.sample_of(self.group(k))

    def sample_of(self, found: Found) -> Sample:
        """The sample of a group (group()'s result) under the current specs."""
        if isinstance(found, dict):  # a damaged tar or an unreadable member
            return found
        where, key, group = found
        return _sample(key, group, self.specs, where, _already_read)

    def size_hints(self) -> np.ndarray:
        """Per sample (int64), the bytes its members hold in the tar: image and sidecars
        together (0 for a damaged tar's error sample); known without reading any data."""
        return self.tar_index.size_hints()

    def item_keys(self) -> np.ndarray | None:
        """Each group's identity from the tar headers (TarIndex.item_keys)."""
        return self.tar_index.item_keys()

    def group(self, k: int) -> Found:
        """(where, key, members expanded by spatial.expand_group) of group k, or its error
        sample."""
        tar = self.tar_index.tars[int(self.tar_index.group_tar[k])]
        if k in self.tar_index.errors:
            return {WHERE_KEY: tar, ERROR_KEY: self.tar_index.errors[k]}
        key, tar_number = self.tar_index.key(k), int(self.tar_index.group_tar[k])
        members = self.tar_index.members(k)
        group: dict[str, object] = {}
        try:
            read = self._reader(tar_number, members)
        except OSError as exc:
            return {WHERE_KEY: f"{tar} member {key}", ERROR_KEY: f"cannot read member "
                    f"{key + members[0][0]}: {exc.strerror or exc}"}
        readable = self.tar_index.readable[tar_number]  # a compressed tar's plain copy
        for suffix, offset, size in members:
            ext = suffix[1:].lower()
            if _is_image(ext) and not self.tar_index.remote:
                group[ext] = TarMember(readable, offset, size, key + suffix)
                continue
            try:
                data = read(offset, size)
            except OSError as exc:
                return {WHERE_KEY: f"{tar} member {key}", ERROR_KEY: f"cannot read member "
                        f"{key + suffix}: {exc.strerror or exc}"}
            if len(data) != size:
                return {WHERE_KEY: f"{tar} member {key}", ERROR_KEY: f"member {key + suffix} "
                        f"is truncated ({len(data)} of {size} bytes)"}
            try:
                group[ext] = _gunzipped(ext, data)
            except (OSError, EOFError) as exc:
                return {WHERE_KEY: f"{tar} member {key}", ERROR_KEY: f"member {key + suffix} "
                        f"is not readable gzip ({exc})"}
        return f"{tar} member {key}", key, spatial.expand_group(group, _already_read)

    def _reader(self, tar: int, members: list[tuple[str, int, int]]
                ) -> Callable[[int, int], bytes]:
        """read(offset, size) of a group's members. A local tar is read member by member;
        at a URL the group's span is fetched in one request (images too: one request a
        sample, in the process that reads the sample) and sliced."""
        if not self.tar_index.remote or not members:
            return lambda offset, size: self.tar_index.read(tar, offset, size)
        start = members[0][1]
        span = self.tar_index.read(tar, start, max(o + s for _, o, s in members) - start)
        return lambda offset, size: span[offset - start: offset - start + size]


TAR_SUFFIXES = (".tar", ".tgz", ".tar.gz")  # WebDataset's shards, gzipped ones included


def is_tar_name(text: str) -> bool:
    """Whether a path or brace pattern names tar shards (.tar, .tgz, .tar.gz)."""
    return text.rstrip("}").lower().endswith(TAR_SUFFIXES)


def tar_files(pattern: str) -> list[str]:
    """The tars a pattern names: a brace pattern expanded, or a local folder's tar files
    (.tar, .tgz, .tar.gz at its top, sorted by name)."""
    folder = Path(pattern).expanduser()
    if not is_url(pattern) and folder.is_dir():
        return sorted(str(p) for p in folder.iterdir() if p.is_file()
                      and is_tar_name(p.name) and not p.name.startswith("."))
    return expand_braces(pattern)


def _tar_paths(pattern: str, storage_options: StorageOptions | None) -> list[str]:
    """The tars a pattern names (local paths made absolute, URLs as given); PackError naming
    the missing ones."""
    if is_url(pattern):
        from fastloader.pack.sources.tar_url import stat_tars

        paths = expand_braces(pattern)
        missing = [url for url, info in zip(paths, stat_tars(paths, storage_options),
                                            strict=True) if info is None]
    else:
        paths = [str(Path(p).expanduser().absolute()) for p in tar_files(pattern)]
        if not paths:
            raise PackError(f"{pattern} holds no tar shards (.tar, .tgz, .tar.gz).")
        missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise PackError(f"{missing[0]}: no such tar shard ({len(missing)} of {len(paths)} "
                        f"named by {pattern!r} are missing: {', '.join(missing[:5])}"
                        f"{' ...' if len(missing) > 5 else ''}).")
    return paths


def open_tars(pattern: str, fields: FieldKinds | None,
              storage_options: StorageOptions | None = None
              ) -> tuple[TarSamples, list[FieldSpec], Description]:
    """(samples by index, fields, source) of WebDataset .tar shards (local paths, or fsspec
    URLs read with storage_options); the fields are those of the first _PEEK groups."""
    paths = _tar_paths(pattern, storage_options)
    samples = TarSamples(TarIndex(paths, split_key, storage_options), [])
    peeked = [samples.group(k) for k in range(min(_PEEK, len(samples)))]
    exts = sorted({e for g in peeked if isinstance(g, tuple) for e in g[2] if e != ERROR_KEY})
    damaged = next((g for g in peeked if isinstance(g, dict)), None)
    if not exts and damaged is not None:  # no good group to take the fields from
        raise PackError(f"{damaged[WHERE_KEY]}: {damaged[ERROR_KEY]}; no whole sample comes "
                        "before it, so there is nothing to pack: fix or replace the shard.")
    samples.specs = _specs(exts, dict(fields or {}), pattern)
    first = [samples.sample_of(found) for found in peeked]  # not read a second time
    samples.specs = _fit_ndarrays(samples.specs, first)
    return samples, samples.specs, {"kind": "tar", "path": pattern}


def open_groups(src: str | os.PathLike[str], kind: str, fields: FieldKinds | None,
                storage_options: StorageOptions | None = None
                ) -> tuple[Sequence[Sample], list[FieldSpec], Description]:
    """Dispatch: a folder of groups or tar shards."""
    if kind == "files":
        return open_folder(Path(src).expanduser().absolute(), fields)
    return open_tars(os.fspath(src), fields, storage_options)
