"""File-group importer, WebDataset's convention: files sharing a basename are one sample.

From a folder tree (x.jpg, x.cls, x.txt ...) or from WebDataset .tar shards (a brace pattern
like data-{000..009}.tar too). The key is the path up to the first dot of the file name; the
rest is the extension, which names the field (jpg, cls, txt, json, npy, as in WebDataset).
Kinds by extension: jpg/jpeg/png/webp/bmp image, cls int, txt text, json json, npy ndarray
(any shape: declare it with fields= / --field EXT:ndarray:DTYPE:SHAPE), anything else bytes.
A folder's fields are every extension found; a tar's those of its first samples (streamed).
Boxes and masks: a `.mask.png` member is the field `mask`, a `.boxes.json` member becomes the
fields `boxes` (+ `box_labels`, `iscrowd`), as pack/spatial.py says.
"""

from __future__ import annotations

import io
import itertools
import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec, check_specs, make_spec
from fastloader.pack import spatial
from fastloader.pack.values import ERROR_KEY, PATH_KEY, WHERE_KEY, TarMember

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp")
_KINDS = {"cls": "int", "txt": "text", "json": "json", "npy": "ndarray"}
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


def _kind(ext: str) -> str:
    last = ext.rpartition(".")[2]
    if last in IMAGE_EXTENSIONS:
        return "image"
    return _KINDS.get(last, "bytes")


def _specs(exts: list[str], overrides: dict[str, Any], where: str) -> list[FieldSpec]:
    unknown = set(overrides) - set(exts)
    if unknown:
        raise PackError(f"{where}: --field names {sorted(unknown)}, extensions no sample has "
                        f"(found {exts}).")
    specs = []
    for ext in exts:
        spec = overrides.get(ext) or spatial.default_kind(ext, exts) or _kind(ext)
        if spec == "ndarray":
            spec = ("ndarray", "float64", (-1,))  # replaced by the first sample's dtype/ndim
        specs.append(make_spec(ext, spec, PackError, where))
    images = sorted((s for s in specs if s.kind == "image"),
                    key=lambda s: _kind(s.name) != "image" or s.name not in ("jpg", "jpeg"))
    rest = [s for s in specs if s.kind != "image"]
    specs = spatial.with_per_box(images + rest)  # a jpg first: the fused-decode records
    check_specs(specs, PackError, where)
    return specs


def _value(spec: FieldSpec, data: bytes) -> Any:
    """A member's bytes as its field's value; ValueError saying why not."""
    if spec.kind == "image" or spec.kind == "bytes":
        return data
    if spec.kind == "ndarray":
        return np.load(io.BytesIO(data), allow_pickle=False)
    text = data.decode("utf-8")
    if spec.kind == "int":
        return int(text.strip())
    if spec.kind == "float":
        return float(text.strip())
    if spec.kind == "text":
        return text
    if spec.kind == "json":
        import json

        return json.loads(text)
    raise ValueError(f"no reader for kind {spec.kind!r}")


def _sample(key: str, members: dict[str, Any], specs: list[FieldSpec], where: str,
            read: Any) -> dict[str, Any]:
    if isinstance(members.get(ERROR_KEY), str):  # a malformed .boxes.json
        return {WHERE_KEY: where, ERROR_KEY: members[ERROR_KEY]}
    sample: dict[str, Any] = {WHERE_KEY: where, PATH_KEY: key}
    for ext, member in members.items():
        spec = next((s for s in specs if s.name == ext), None)
        if spec is None:
            return {WHERE_KEY: where, ERROR_KEY: f"has field {ext!r} ({key}.{ext}), which the "
                    "first samples do not have; declare it with --field or remove it"}
        try:
            if isinstance(member, spatial.Parsed):
                sample[ext] = spatial.typed(member.value, spec)
            elif spec.kind == "mask":  # a path or the PNG's bytes: read in the worker
                sample[ext] = member
            else:
                sample[ext] = member if spec.kind == "image" and isinstance(
                    member, (Path, TarMember)) else _value(spec, read(member))
        except (ValueError, UnicodeDecodeError) as exc:
            return {WHERE_KEY: f"{where}.{ext}", ERROR_KEY:
                    f"field {ext!r} ({spec.kind}): cannot be read ({exc})"}
    return sample


def _fit_ndarrays(specs: list[FieldSpec], first: list[dict[str, Any]]) -> list[FieldSpec]:
    """An undeclared npy field takes the dtype of its first value, every dim variable."""
    out = []
    for spec in specs:
        if spec.kind == "ndarray" and spec.shape == (-1,):
            value = next((s[spec.name] for s in first if isinstance(s.get(spec.name),
                                                                    np.ndarray)), None)
            if value is not None:
                spec = FieldSpec(spec.name, "ndarray", str(value.dtype), (-1,) * value.ndim)
        out.append(spec)
    return out


def open_folder(path: Path, fields: Any) -> tuple[list[dict[str, Any]], list[FieldSpec],
                                                    dict[str, Any]]:
    """(samples, fields, source) of a folder of file groups."""
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in
                                              p.relative_to(path).parts))
    groups: dict[str, dict[str, Any]] = {}
    for name in files:
        key, ext = split_key(name)
        groups.setdefault(key, {})[ext] = path / name
    groups = {key: spatial.expand_group(group, lambda p: p.read_bytes())
              for key, group in groups.items()}
    exts = sorted({ext for group in groups.values() for ext in group if ext != ERROR_KEY})
    specs = _specs(exts, dict(fields or {}), str(path))
    samples = [_sample(key, members, specs, f"{path}/{key}", lambda p: p.read_bytes())
               for key, members in groups.items()]
    specs = _fit_ndarrays(specs, samples[:_PEEK])
    return samples, specs, {"kind": "files", "path": str(path)}


def _tar_groups(paths: list[Path]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(tar name, key, {ext: bytes, or a TarMember for images}) in order. Only the headers
    are walked here (uncompressed tars: data is skipped by seeking); image data is read by the
    pool's workers. A damaged or truncated tar ends with an error group."""
    for tar_path in paths:
        key, group = None, {}
        size = tar_path.stat().st_size
        try:
            with tarfile.open(tar_path, "r:") as tar:
                for member in tar:
                    if not member.isfile() or member.name.split("/")[-1].startswith("."):
                        continue
                    if member.offset_data + member.size > size:
                        raise tarfile.ReadError(f"member {member.name!r} needs "
                                                f"{member.size} bytes past the end of the file")
                    name_key, ext = split_key(member.name)
                    if key is not None and name_key != key:
                        yield str(tar_path), key, group
                        group = {}
                    key = name_key
                    group[ext] = _member_value(tar, tar_path, member, ext)
        except (tarfile.TarError, EOFError, OSError) as exc:
            yield str(tar_path), f"{key or '?'}", {"__error__": f"truncated or damaged tar after "
                                                  f"member {key!r} ({exc})".encode()}
            continue
        if key is not None:
            yield str(tar_path), key, group


def _member_value(tar: tarfile.TarFile, path: Path, member: tarfile.TarInfo, ext: str) -> Any:
    if _kind(ext) == "image":
        return TarMember(str(path), member.offset_data, member.size, member.name)
    handle = tar.extractfile(member)
    return handle.read() if handle is not None else b""


def open_tars(pattern: str, fields: Any) -> tuple[Iterator[dict[str, Any]], list[FieldSpec],
                                                  dict[str, Any]]:
    """(samples in order, fields, source) of WebDataset .tar shards."""
    paths = [Path(p).expanduser().absolute() for p in expand_braces(pattern)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise PackError(f"{missing[0]}: no such tar shard ({len(missing)} of {len(paths)} "
                        f"named by {pattern!r} are missing).")
    groups = ((tar, key, group if "__error__" in group else spatial.expand_group(
        group, lambda data: data)) for tar, key, group in _tar_groups(paths))
    peeked = list(itertools.islice(groups, _PEEK))
    exts = sorted({e for _, _, g in peeked for e in g if e != "__error__"})
    specs = _specs(exts, dict(fields or {}), pattern)

    def samples(items: Any) -> Iterator[dict[str, Any]]:
        for tar_name, key, group in items:
            where = f"{tar_name} member {key}"
            if isinstance(group.get("__error__"), bytes):  # a damaged tar
                yield {WHERE_KEY: f"{tar_name}", ERROR_KEY: group["__error__"].decode()}
                continue
            yield _sample(key, group, specs, where, lambda data: data)

    first = list(samples(peeked))
    specs = _fit_ndarrays(specs, first)
    return itertools.chain(first, samples(groups)), specs, {"kind": "tar", "path": pattern}


def open_groups(src: str | os.PathLike[str], kind: str, fields: Any) -> Any:
    """Dispatch: a folder of groups or tar shards."""
    if kind == "files":
        return open_folder(Path(src).expanduser().absolute(), fields)
    return open_tars(os.fspath(src), fields)
