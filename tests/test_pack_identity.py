"""Byte-identity of pack's output: every source kind, packed from generated inputs, gives the
datasets it gave before the packer was rebuilt (digests pinned at commit 0b14fe4).

The inputs' JPEG and PNG bytes come from Pillow, so each case pins its inputs' digest too and
fails (naming the reason) where another Pillow encodes them differently: a guard that skipped
there would pass while guarding nothing; otherwise a changed output digest means the packer
writes other bytes than it did.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fastloader
from conftest import NATIVE_DISABLED
from helpers import coco_file, dataset_bytes, sample_table
from imagegen import encode, make_tree, photo_like

MTIME = 1_700_000_000  # every input file's mtime: the sources' fingerprints depend on it
SHARD = 3000  # bytes: several shards from a few small images


def _rows(root: Path) -> list[dict[str, Any]]:
    """sample_table's rows, for the JSONL and Parquet forms of the same table."""
    import csv

    with open(root / "t.csv", newline="") as handle:
        return [dict(row) | {"size": float(row["size"])} for row in csv.DictReader(handle)]


def _table(root: Path, suffix: str) -> Path:
    table = sample_table(root, 12, bad=(5,))
    if suffix == "jsonl":
        path = root / "t.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in _rows(root)))
        return path
    if suffix == "parquet":
        pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow reads .parquet tables")
        import pyarrow as pa

        path = root / "t.parquet"
        pq.write_table(pa.Table.from_pylist(_rows(root)), path)
        return path
    return table


def _groups(root: Path) -> list[tuple[str, bytes]]:
    """File-group members: key.jpg + key.cls + key.json, 9 groups."""
    members = []
    for k in range(9):
        members += [(f"s{k:02d}.jpg", encode(photo_like(18, 22 + k, 50 + k))),
                    (f"s{k:02d}.cls", str(k % 3).encode()),
                    (f"s{k:02d}.json", json.dumps({"k": k}).encode())]
    return members


def _folder(root: Path) -> Path:
    (root / "g").mkdir(parents=True)
    for name, data in _groups(root):
        (root / "g" / name).write_bytes(data)
    return root / "g"


def _tars(root: Path) -> str:
    root.mkdir(parents=True)
    members = _groups(root)
    for t in range(2):
        with tarfile.open(root / f"w-{t}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in members[t * 15:(t + 1) * 15]:
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), MTIME
                tar.addfile(info, io.BytesIO(data))
    return str(root / "w-{0..1}.tar")


def _samples() -> list[dict[str, Any]]:
    return [{"image": encode(photo_like(16, 20 + k, 90 + k)), "label": k % 4,
             "score": np.float32(k) / 3, "tag": f"t{k}"} for k in range(10)]


SAMPLE_FIELDS = {"image": "image", "label": ("int", ["a", "b", "c", "d"]), "score": "float",
                 "tag": "text"}

# case -> (how to make its input under root: -> (src, pack options)), pinned digests below
CASES: dict[str, Any] = {
    "imagefolder": lambda root: (make_tree(root / "tree", 3, 4), {}),
    "imagefolder_tiles": lambda root: (make_tree(root / "tree", 2, 3, size=(64, 80)),
                                       {"tiles": True}),
    "csv": lambda root: (_table(root / "t", "csv"), {"label": "species", "skip_bad": True}),
    "jsonl": lambda root: (_table(root / "t", "jsonl"), {"label": "species",
                                                         "skip_bad": True}),
    "parquet": lambda root: (_table(root / "t", "parquet"), {"label": "species",
                                                             "skip_bad": True}),
    "files": lambda root: (_folder(root / "f"), {}),
    "tar": lambda root: (_tars(root / "w"), {}),
    "coco": lambda root: (coco_file(root / "c"), {}),
    "coco_masks": lambda root: (coco_file(root / "c"), {"masks": True}),
    "python": lambda root: (_samples(), {"fields": SAMPLE_FIELDS, "shard_samples": 3}),
}


def _tree_digest(root: Path) -> str:
    """sha256 over every input file's relative path and bytes (mtimes set to MTIME)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        os.utime(path, (MTIME, MTIME))
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _samples_digest(samples: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256()
    for sample in samples:
        digest.update(sample["image"] + repr(sorted((k, str(v)) for k, v in sample.items()
                                                    if k != "image")).encode())
    return digest.hexdigest()


def _normalised(dst: Path, root: Path) -> str:
    """dataset_bytes(dst) as one digest, with the input folder's absolute path (which differs
    from run to run) replaced by ROOT wherever it is written: in manifest.json (which also
    loses its stamps, created_at and the tool's version, and the source's fingerprint, a hash
    of absolute paths), skipped.json and the index's path arrays (their digests, sizes and
    offsets are those of the paths with ROOT)."""
    found = dataset_bytes(dst)
    manifest = dict(found.pop("manifest.json"))
    manifest.pop("created_at", None)
    manifest.pop("created_by", None)
    source = manifest.get("options", {}).get("source")
    if isinstance(source, dict) and "fingerprint" in source:
        manifest["options"] = manifest["options"] | {
            "source": source | {"fingerprint": len(source["fingerprint"])}}
    fields = dict(manifest.get("fields", {}))
    if (dst / "index" / "path_bytes.npy").exists():
        blob = np.load(dst / "index" / "path_bytes.npy").tobytes()
        ends = np.load(dst / "index" / "path_offsets.npy")
        paths = [blob[a:b].decode().replace(str(root), "ROOT")
                 for a, b in itertools.pairwise(ends)]
        digest = hashlib.sha256("\0".join(paths).encode()).hexdigest()
        for name in ("path_bytes", "path_offsets"):
            found[f"index/{name}.npy"] = digest
            fields[name] = {"file": fields[name]["file"], "sha256": digest}
        manifest["fields"] = fields
    if (dst / "skipped.json").exists():
        text = (dst / "skipped.json").read_text().replace(str(root), "ROOT")
        found["skipped.json"] = hashlib.sha256(text.encode()).hexdigest()
    text = json.dumps(found | {"manifest.json": manifest}, sort_keys=True)
    return hashlib.sha256(text.replace(str(root), "ROOT").encode()).hexdigest()


# case -> (inputs' digest, outputs' digest), as 0b14fe4 packed them (Pillow 13.0); the two
# ImageFolder cases re-pinned when the tree became an importer of {image, label} samples
# (issue 36: format v2, its shards and core index arrays byte-identical to the v1 pack's, the
# label column and manifest.json v2's)
PINNED: dict[str, tuple[str, str]] = {
    "coco": ("ac8d3befca2807116bba71e7cd5f813c1e1cd07202717168e438530045af77b8",
             "ff82cc9a6bc41856783fcdac2a70061cd8072e3ebfe8a70271b6570feb2587d8"),
    "coco_masks": ("ac8d3befca2807116bba71e7cd5f813c1e1cd07202717168e438530045af77b8",
                   "f71aeb4669d9220ca2d7ea065aff275a05c2a37e55b139c6f6b4b450b174113e"),
    "csv": ("f42b439f9ca41309245e19b5e89ae900536a4204f87c0c4dada8181f472caa2d",
            "56568bcfb89d1af5f31ed99b21b4c541122bcfc1f87046cdb531a96d4828758d"),
    "files": ("ecdfe27dc5bc5e9573b704aac5f28d54eb003a9e486352b1c1dd7e99d3700736",
              "aa8df185c15ea8c7a2e5e0c4f448fb1ea11d46fccca2e185596739cf8d200fd2"),
    "imagefolder": ("c87e8bc5f4ec2895a4ea2316a6bcd4c8df116c9de7ea88ff651e79dfa7a59087",
                    "f1bdbb953cabb63a4a70db4453cd6458e873885de34ba9682124326eb40c56b6"),
    "imagefolder_tiles": ("687fea98f0b1396785e870bca543c249c00aad518fdd2fa5dd187bac80cabb8d",
                          "e50ad61d71c8e8e67eda7246526fd43d39ee0b861f1c8431c905cfaa062bd592"),
    "jsonl": ("6f7219411866cf382ef86ec411592aecb5fa28b4f60c0449d8613271c25622c3",
              "730f7d8f2ec6211ff4becfe99533056dd440c00c1db6022f57beea67c4b25a4f"),
    "parquet": ("ddbc81d4faec571052f20565e20d89d315b40bd9882395bec37608290217a34a",
                "fd9df572d8976cb3b00963067f15e8cf5c78d17a2e558df84774f241381d352a"),
    "python": ("15addf3865a159a0519d9fe32ea739162b8a4774e2b319fd0c3768187588e2f4",
               "2cd9def82f78a6b3ae98252f108287d547921a819c0513e818b7264db6cde89d"),
    "tar": ("a382f6e5be9af81ce717628d5a5ab8b7078a55c50293b5984e746e0f3c9a9193",
            "9419c3ec7c066e2c135e61dfdf1f1e80c787d5590fc584e00bd19aa00eb4b6c3"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_source_packs_the_bytes_it_did(tmp_path: Path, case: str) -> None:
    if case == "imagefolder_tiles" and NATIVE_DISABLED:
        pytest.skip("tiles need the native extension")
    root = tmp_path / "in"
    root.mkdir()
    src, options = CASES[case](root)
    inputs = _samples_digest(src) if case == "python" else _tree_digest(root)
    want_inputs, want_outputs = PINNED[case]
    assert inputs == want_inputs, (
        f"{case}: the generated inputs differ from the pinned ones (another Pillow or numpy "
        "encodes them otherwise), so the outputs cannot be compared: pin this environment's "
        "inputs and outputs, checked against a pack made by the packer the pins were made with")
    dst = tmp_path / "out" / "d.lmdb"
    dst.parent.mkdir()
    fastloader.pack(src, dst, workers=2, shard_size=SHARD, **options)
    assert _normalised(dst, root) == want_outputs, (
        f"{case}: the packed dataset's bytes changed")


def test_the_normalised_digest_sees_a_changed_byte(tmp_path: Path) -> None:
    """The guard's guard: one flipped byte in a shard changes the digest."""
    root = tmp_path / "in"
    src, _ = CASES["imagefolder"](root)
    _tree_digest(root)
    dst = tmp_path / "d.lmdb"
    fastloader.pack(src, dst, workers=1, shard_size=SHARD)
    before = _normalised(dst, root)
    shard = next(dst.glob("shard-*"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    assert _normalised(dst, root) != before
