"""The member index of WebDataset .tar shards: one header walk, kept as compact numpy arrays.

Tars are local paths (read by os.pread on descriptors cached per process) or fsspec URLs (the
walk reads ahead in large blocks, reads are ranged requests: pack/sources/tar_url.py).
A compressed local tar (.tgz / .tar.gz as WebDataset writes them, bzip2 or xz; known by its
first bytes, whatever its name) has no random access: a member's offset is one in the
decompressed stream. It is decompressed once, when indexed, into a temporary .tar (in TMPDIR,
removed with the index), which the walk and every read then use; the packed dataset stores
the members' bytes, so nothing is decompressed at load time. At a URL one is refused.

A group is a run of consecutive members sharing a key (WebDataset's convention: a key seen
again later starts a new group). Per group: its tar, its key (UTF-8 bytes + offsets) and its
members; per member: its name's suffix (a code into a small table of distinct suffixes), data
offset and size. No Python object per member or group is kept, so a pack's driver holds
millions of samples in a few tens of bytes each, and forks or pickles the index cheaply.
"""

from __future__ import annotations

import array
import bz2
import collections
import lzma
import os
import shutil
import tarfile
import tempfile
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from fastloader.errors import PackError
from fastloader.format.remote import is_url
from fastloader.pack.sources import tar_url
from fastloader.pack.sources.types import StorageOptions

_OPEN_MAX = 16  # tar file descriptors kept open per process (least recently used closed)
# A URL tar is read ahead this much per request, and the block kept (one per process): a
# shard task reads consecutive groups, so they share requests instead of one each.
_READ_BLOCK = 4 << 20
_BLOCK = 512  # a tar header; an archive ends with zero blocks
class _Decompressor(Protocol):
    """zlib's, bz2's and lzma's incremental decompressors, as _decompressed uses them."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, /) -> bytes: ...


# a compressed stream's first bytes -> its name; a name -> a new incremental decompressor
_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz",
          b"\x28\xb5\x2f\xfd": "zstd"}
_DECOMPRESSORS: dict[str, Callable[[], _Decompressor]] = {
    "gzip": lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), "bzip2": bz2.BZ2Decompressor,
    "xz": lzma.LZMADecompressor}


def compression(head: bytes) -> str | None:
    """The compression a file's first bytes announce (gzip, bzip2, xz, zstd), or None."""
    return next((name for magic, name in _MAGIC.items() if head.startswith(magic)), None)


class _Walk:
    """The index's columns while the headers are walked (array.array: no object per item)."""

    def __init__(self) -> None:
        self.group_tar = array.array("i")
        self.key_bytes = bytearray()
        self.key_ends = array.array("q")
        self.member_ends = array.array("q")
        self.suffix_code = array.array("i")
        self.offset = array.array("q")
        self.size = array.array("q")
        self.suffixes: dict[str, int] = {}
        self.errors: dict[int, str] = {}

    def add_member(self, suffix: str, offset: int, size: int) -> None:
        self.suffix_code.append(self.suffixes.setdefault(suffix, len(self.suffixes)))
        self.offset.append(offset)
        self.size.append(size)

    def end_group(self, tar: int, key: str) -> None:
        self.group_tar.append(tar)
        self.key_bytes += key.encode("utf-8", "surrogateescape")
        self.key_ends.append(len(self.key_bytes))
        self.member_ends.append(len(self.offset))

    def fail(self, tar: int, message: str) -> None:
        """A damaged tar: the group in progress is dropped, an error group (no members) ends
        that tar's good groups."""
        kept = self.member_ends[-1] if self.member_ends else 0
        for column in (self.suffix_code, self.offset, self.size):
            del column[kept:]
        self.errors[len(self.group_tar)] = message
        self.end_group(tar, "")


def _walk_tar(walk: _Walk, tar_index: int, source: Path | IO[bytes], size: int,
              split_key: Callable[[str], tuple[str, str]], cut: str = "") -> None:
    """Index one tar: a local path, or a URL's open file (the same checks, the same errors).
    A tar that ends before its end-of-archive block is truncated, and its last group is
    dropped (it may have lost members); cut: why a decompressed copy ended early."""
    key = None
    try:
        with (tarfile.open(source, "r:") if isinstance(source, Path)
              else tarfile.open(fileobj=source, mode="r:")) as tar:
            while (member := tar.next()) is not None:
                tar.members.clear()  # type: ignore[attr-defined]  # tarfile keeps each TarInfo
                if member.offset_data + member.size > size:
                    raise _Cut(f"truncated at byte {size}: member {member.name!r} needs bytes "
                               f"{member.offset_data}..{member.offset_data + member.size}")
                if not member.isfile() or member.name.split("/")[-1].startswith("."):
                    continue
                name_key = split_key(member.name)[0]
                if key is not None and name_key != key:
                    walk.end_group(tar_index, key)
                key = name_key
                walk.add_member(member.name[len(key):], member.offset_data, member.size)
            end = tar.offset  # tarfile ends quietly at a short or garbled header
        problem = _end_problem(_block_at(source, end), end, size, key)
    except _Cut as exc:
        problem = str(exc)
    except (tarfile.TarError, EOFError, OSError) as exc:
        after = f" after member group {key!r}" if key is not None else ""
        problem = (f"truncated at byte {size}: the tar stops{after} before the next "
                   "member's header"
                   if str(exc) in _ENDS_EARLY else f"damaged tar{after} ({exc})")
    if problem is not None:
        walk.fail(tar_index, f"{problem}{cut}")
    elif key is not None:
        walk.end_group(tar_index, key)


# tarfile's words for a file that ends inside a member or its headers: its data, a header cut
# short, or the header a pax / GNU long-name header announces missing (read as empty)
_ENDS_EARLY = ("unexpected end of data", "truncated header", "empty header")


class _Cut(Exception):
    """The walk found a member past the end of the file."""


def _block_at(source: Path | IO[bytes], offset: int) -> bytes:
    if isinstance(source, Path):
        with open(source, "rb") as handle:
            return os.pread(handle.fileno(), _BLOCK, offset)
    source.seek(offset)
    return bytes(source.read(_BLOCK))


def _end_problem(block: bytes, end: int, size: int, key: str | None) -> str | None:
    """Why the tar does not end where its last member does (None: an end-of-archive block)."""
    after = f" (after member group {key!r})" if key is not None else ""
    if len(block) < _BLOCK:
        return (f"truncated at byte {size}: the tar stops{after} before its end-of-archive "
                "block" + (", inside a member header" if block else ""))
    if block.count(0) != _BLOCK:
        return f"damaged tar: no member header at byte {end}{after}"
    return None


def _decompressed(tar: str, kind: str, folder: str, k: int) -> tuple[str, str]:
    """(path of tar's decompressed copy in folder, why it ended early or ""). Decompressed a
    block at a time, so a stream cut short keeps every byte before the cut (the walk then
    names where the tar inside stops); concatenated streams are read on."""
    copy = os.path.join(folder, f"{k:06d}.tar")
    make = _DECOMPRESSORS[kind]
    engine = make()
    with open(tar, "rb") as source, open(copy, "wb") as out:
        while block := source.read(1 << 20):
            while block:
                try:
                    out.write(engine.decompress(block))
                except (zlib.error, OSError, EOFError, lzma.LZMAError) as exc:
                    return copy, f" (the {kind} stream is damaged: {exc})"
                block = engine.unused_data if engine.eof else b""
                if block.strip(b"\0"):  # a next stream (a trailing zero padding is none)
                    engine = make()
                else:
                    block = b""
    if not engine.eof:
        return copy, (f" (the {kind} stream is cut short: {tar} ends at byte "
                      f"{os.path.getsize(tar)} before the stream's end)")
    return copy, ""


def _remove_folder(folder: str, pid: int) -> None:
    if os.getpid() == pid:  # a forked child's copy of the index leaves its parent's alone
        shutil.rmtree(folder, ignore_errors=True)


def _refuse_compressed(url: str, head: bytes) -> None:
    kind = compression(head)
    if kind is not None:
        raise PackError(f"{url} is a {kind}-compressed tar: its members have no byte offsets "
                        "a ranged request can read; decompress the shards (gunzip) or copy "
                        "them to a local folder and pack them from there.")


class TarIndex:
    """Groups of members of a list of tars (compressed local ones through a decompressed
    copy), and their reads by offset."""

    def __init__(self, paths: list[Path] | list[str], split_key: Callable[[str], tuple[str, str]],
                 storage_options: StorageOptions | None = None) -> None:
        """Walk every tar's headers once (data is skipped by seeking); split_key(name) gives
        a member's (key, extension). paths: local paths, or fsspec URLs (all of them)."""
        self.tars = [str(p) for p in paths]
        self.remote = bool(self.tars) and is_url(self.tars[0])
        self.storage_options = storage_options  # a URL's fsspec options (travel when pickled)
        walk = _Walk()
        self.tar_sizes: list[int] = []
        self.readable = list(self.tars)  # what is read: the tar, or its decompressed copy
        self._copies: str | None = None  # the folder of decompressed copies, when any
        for tar_index, tar in enumerate(self.tars):
            if self.remote:
                with tar_url.open_for_walk(tar, storage_options) as handle:
                    _refuse_compressed(tar, handle.read(8))
                    handle.seek(0)
                    self.tar_sizes.append(int(handle.size))
                    _walk_tar(walk, tar_index, handle, handle.size, split_key)
            else:
                cut = self._plain(tar_index)
                self.tar_sizes.append(Path(self.readable[tar_index]).stat().st_size)
                _walk_tar(walk, tar_index, Path(self.readable[tar_index]),
                          self.tar_sizes[-1], split_key, cut)
        self.group_tar = np.frombuffer(walk.group_tar, np.int32).copy()
        self.key_bytes = np.frombuffer(bytes(walk.key_bytes), np.uint8)
        self.key_offsets = np.concatenate([[0], np.frombuffer(walk.key_ends, np.int64)])
        self.member_offsets = np.concatenate([[0], np.frombuffer(walk.member_ends, np.int64)])
        self.suffix_code = np.frombuffer(walk.suffix_code, np.int32).copy()
        self.offset = np.frombuffer(walk.offset, np.int64).copy()
        self.size = np.frombuffer(walk.size, np.int64).copy()
        self.suffixes = list(walk.suffixes)  # code -> a member name's suffix (".seg.png")
        self.errors = walk.errors  # group -> why its tar is damaged (rare: a dict)
        self._fds: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._block: tuple[int, int, bytes] | None = None  # a URL's: (tar, offset, data)
        self._pid = os.getpid()

    def _plain(self, k: int) -> str:
        """Point readable[k] at tar k decompressed, if it is compressed; why its copy ended
        early ("" if it did not, or it is not compressed)."""
        with open(self.tars[k], "rb") as handle:
            kind = compression(handle.read(8))
        if kind is None:
            return ""
        if kind == "zstd":
            raise PackError(f"{self.tars[k]} is a zstd-compressed tar, which is not read here; "
                            "decompress it first (zstd -d), or write gzip (.tgz) shards.")
        if self._copies is None:
            self._copies = tempfile.mkdtemp(prefix="fastloader-tars-")
            weakref.finalize(self, _remove_folder, self._copies, os.getpid())
        self.readable[k], cut = _decompressed(self.tars[k], kind, self._copies, k)
        return cut

    def __len__(self) -> int:
        return len(self.group_tar)

    def nbytes(self) -> int:
        """Bytes the index's arrays hold."""
        return sum(a.nbytes for a in (self.group_tar, self.key_bytes, self.key_offsets,
                                      self.member_offsets, self.suffix_code, self.offset,
                                      self.size))

    def key(self, group: int) -> str:
        start, end = self.key_offsets[group], self.key_offsets[group + 1]
        return self.key_bytes[start:end].tobytes().decode("utf-8", "surrogateescape")

    def members(self, group: int) -> list[tuple[str, int, int]]:
        """(name suffix, data offset, size) of the group's members, in tar order."""
        first, end = self.member_offsets[group], self.member_offsets[group + 1]
        codes, offsets = self.suffix_code[first:end].tolist(), self.offset[first:end].tolist()
        return [(self.suffixes[c], o, s) for c, o, s in zip(
            codes, offsets, self.size[first:end].tolist(), strict=True)]

    def size_hints(self) -> np.ndarray:
        """int64 per group: the sum of its members' sizes (0 for a damaged tar's error
        group)."""
        ends = np.concatenate([[0], np.cumsum(self.size, dtype=np.int64)])
        return ends[self.member_offsets[1:]] - ends[self.member_offsets[:-1]]

    def item_keys(self) -> np.ndarray | None:
        """uint8 (n, KEY_BYTES) per group: its tar's size and mtime, its key and its members'
        suffixes, offsets and sizes, from the headers alone (a changed tar changes the keys of
        its own groups only); None for tars at URLs (their fingerprint decides)."""
        if self.remote:
            return None
        from fastloader.pack.sources.hints import KEY_BYTES, file_stamp, key_of

        stamps = [file_stamp(tar) for tar in self.tars]
        keys = np.empty((len(self), KEY_BYTES), np.uint8)
        for k in range(len(self)):
            lo, hi = int(self.member_offsets[k]), int(self.member_offsets[k + 1])
            key = bytes(self.key_bytes[self.key_offsets[k]:self.key_offsets[k + 1]])
            keys[k] = key_of([stamps[int(self.group_tar[k])], key.hex(),
                              self.suffix_code[lo:hi].tolist(), self.offset[lo:hi].tolist(),
                              self.size[lo:hi].tolist(), self.errors.get(k)])
        return keys

    def read(self, tar: int, offset: int, size: int) -> bytes:
        """size bytes at offset of tar `tar` (fewer if the file shrank since the walk)."""
        if self._pid != os.getpid():  # forked: this process opens its own descriptors (the
            # inherited ones are left alone: the child may have closed and reused their numbers)
            self._fds, self._block, self._pid = collections.OrderedDict(), None, os.getpid()
        if self.remote:
            return self._read_url(tar, offset, size)
        fd = self._fds.get(tar)
        if fd is None:
            fd = self._fds[tar] = os.open(self.readable[tar], os.O_RDONLY | os.O_CLOEXEC)
            if len(self._fds) > _OPEN_MAX:
                os.close(self._fds.popitem(last=False)[1])
        else:
            self._fds.move_to_end(tar)
        return os.pread(fd, size, offset)

    def _read_url(self, tar: int, offset: int, size: int) -> bytes:
        """From this process's block, else one ranged request of _READ_BLOCK bytes (or size)."""
        if self._block is not None:
            block_tar, start, data = self._block
            if block_tar == tar and start <= offset and offset + size <= start + len(data):
                return data[offset - start: offset - start + size]
        end = max(offset + size, min(offset + _READ_BLOCK, self.tar_sizes[tar]))
        data = tar_url.read_range(self.tars[tar], offset, end - offset, self.storage_options)
        self._block = (tar, offset, data)
        return data[:size]

    def close(self, _getpid: Callable[[], int] = os.getpid,
              _close: Callable[[int], None] = os.close) -> None:
        """Close this process's descriptors (reads reopen them). os's functions are bound
        as defaults: at interpreter exit __del__ may run after the os module is torn down."""
        if getattr(self, "_pid", -1) == _getpid():
            while self._fds:
                _close(self._fds.popitem()[1])

    def __del__(self) -> None:
        self.close()

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_fds"], state["_pid"] = collections.OrderedDict(), -1  # descriptors stay here
        state["_block"] = None
        return state
