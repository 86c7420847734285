"""An ImageFolder tree (SRC/<class>/<images>, a folder or its URL) as an importer of
{image, label} samples over its listing: packed like any importer's samples (format v2), its
classes the sorted class folders, each file read by the worker that checks it.

The listing (sources/scan, or sources/scan_remote for a URL) stays in compact arrays
(sources/listing): a sample is built only when a worker asks for it, its size hint and resume
key come from the listing entry (path, label, size, mtime), and the shard plan keeps the
listing itself, so a shard task (Ray, `packdata shard`) reads its samples from the plan instead
of listing the tree again (ImageFolder.planned).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec
from fastloader.format.remote import is_url
from fastloader.pack.sources.base import Listed, ListedPlan
from fastloader.pack.sources.hints import KEY_BYTES
from fastloader.pack.sources.listing import Listing
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source
from fastloader.pack.sources.scan import NOT_DATA, ScanResult, scan
from fastloader.pack.sources.scan_remote import scan_url
from fastloader.pack.sources.types import Description, Sample, StorageOptions
from fastloader.pack.sources.validate import ListedFile
from fastloader.pack.sources.values import PATH_KEY, WHERE_KEY

IMAGE, LABEL = "image", "label"  # the tree's fields
_KEY_BLOCK = 1024  # listing entries keyed at a time (bounds the temporaries)


class TreeSamples:
    """A tree's listed files as samples {image: its path or URL (a ListedFile, read in the
    worker), label: class id}, built on demand (index i is listing entry i: torchvision
    ImageFolder's order)."""

    def __init__(self, listing: Listing, root: Path | str, counts: dict[str, Any]) -> None:
        self.listing, self.root, self.counts = listing, root, counts
        self._prefix = root.rstrip("/") + "/" if isinstance(root, str) else f"{root}{os.sep}"

    def __len__(self) -> int:
        return len(self.listing)

    def __getitem__(self, i: int) -> Sample:
        if not 0 <= i < len(self.listing):
            raise IndexError(f"file {i} of a tree of {len(self.listing)}")
        relpath = self.listing.relpath(i)
        location = self._prefix + relpath  # what an error names; the index keeps relpath
        return {WHERE_KEY: location, PATH_KEY: relpath, IMAGE: ListedFile(location),
                LABEL: int(self.listing.labels[i])}

    def __iter__(self) -> Iterator[Sample]:
        return (self[i] for i in range(len(self)))

    def size_hints(self) -> np.ndarray:
        """Each file's size as listed (sources/hints.size_hints asks for it)."""
        return np.asarray(self.listing.sizes, np.int64)

    def item_keys(self) -> np.ndarray:
        """uint8 (n, KEY_BYTES): each file's listing entry (path, label, size, mtime) hashed,
        so a changed, renamed or relabelled file changes its shard's keys (--resume); read a
        block of entries at a time (no copy of the listing)."""
        listing = self.listing
        keys = np.empty((len(listing), KEY_BYTES), np.uint8)
        for lo in range(0, len(listing), _KEY_BLOCK):
            hi = min(lo + _KEY_BLOCK, len(listing))
            ends = listing.path_offsets[lo:hi + 1].tolist()
            blob = listing.path_bytes[ends[0]:ends[-1]].tobytes()
            rows = np.stack([listing.labels[lo:hi].astype(np.int64), listing.sizes[lo:hi],
                             listing.mtimes[lo:hi]], 1).tobytes()
            block = bytearray()
            for k in range(hi - lo):
                entry = blob[ends[k] - ends[0]:ends[k + 1] - ends[0]] + b"\0" + \
                    rows[24 * k:24 * k + 24]
                block += hashlib.blake2b(entry, digest_size=KEY_BYTES).digest()
            keys[lo:hi] = np.frombuffer(block, np.uint8).reshape(hi - lo, KEY_BYTES)
        return keys

    def listed(self) -> ListedPlan:
        """What the shard plan keeps of the listing (sources/base.Listed)."""
        listing = self.listing
        return ListedPlan(np.asarray(listing.path_offsets, np.int64),
                          np.asarray(listing.path_bytes, np.uint8),
                          np.asarray(listing.labels, np.int64),
                          np.asarray(listing.mtimes, np.int64), self.root, dict(self.counts),
                          [r for r in self.counts.get("refused", []) if r[1] not in NOT_DATA])

    def fingerprint(self) -> str:
        """sha256 of the listing (every file's path, label, size, mtime) and the classes."""
        digest = hashlib.sha256(repr(self.counts.get("classes")).encode())
        for column in (self.listing.path_offsets, self.listing.path_bytes,
                       self.listing.labels.astype(np.int64), self.listing.sizes,
                       self.listing.mtimes):
            digest.update(np.ascontiguousarray(column).tobytes())
        return digest.hexdigest()


def _counts(result: ScanResult) -> dict[str, Any]:
    """The scan's counts and refusals, as the plan keeps them (manifest stats, skipped.json)."""
    return {"classes": list(result.classes), "ignored_hidden": result.ignored_hidden,
            "ignored_non_image": result.ignored_non_image,
            "ignored_outside_classes": result.ignored_outside_classes,
            "empty_classes": list(result.empty_classes),
            "refused": [list(r) for r in result.refused]}


def _specs(classes: list[str]) -> list[FieldSpec]:
    return [FieldSpec(IMAGE, "image"), FieldSpec(LABEL, "int", classes=tuple(classes))]


def open_tree(src: str, max_file_size: int, storage_options: StorageOptions | None
              ) -> tuple[TreeSamples, list[FieldSpec], Description]:
    """(samples, fields, description with its fingerprint) of the tree at src (a folder, or
    a URL listed once here)."""
    result = (scan_url(src, max_file_size, storage_options) if is_url(src)
              else scan(src, max_file_size))
    samples = TreeSamples(result.files, result.root, _counts(result))
    return samples, _specs(result.classes), {"kind": ImageFolder.name, "path": str(result.root),
                                             "fingerprint": samples.fingerprint()}


class ImageFolder(Source):
    """The ImageFolder tree: chosen when no other source claims a path (its scan then says
    what is wrong with it)."""

    name = "imagefolder"
    rank = 1000  # asked last

    def detect(self, probe: Probe) -> bool:
        return True

    def open(self, src: str, opening: Opening) -> Opened:
        given = [f"{name}=" for name, value in (
            ("fields", opening.fields), ("image", opening.image), ("label", opening.label),
            ("root", opening.root)) if value]
        if given:
            raise PackError(f"{', '.join(given)} do not apply to an ImageFolder tree (its "
                            "classes are its folders, its images the files); pass "
                            'source_format="files" if it is a folder of file groups.')
        return open_tree(src, opening.max_file_size, opening.storage_options)

    def planned(self, plan: Listed) -> TreeSamples | None:
        """The samples of a plan that keeps this tree's listing: read from there, the tree
        not listed again."""
        if plan.path_offsets is None or plan.path_bytes is None or plan.labels is None \
                or plan.mtimes is None or plan.root is None:
            return None
        listing = Listing(plan.path_offsets, plan.path_bytes, plan.labels, plan.sizes,
                          plan.mtimes)
        return TreeSamples(listing, plan.root, dict(plan.scan))

