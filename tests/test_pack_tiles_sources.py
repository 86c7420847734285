"""tiles=True / --tiles for every field source (a table, .tar shards, COCO, Python samples):
the records' image field is repacked as restart tiles as an ImageFolder pack's is, and a
FastLoader over the tiled pack gives exactly the untiled pack's batches."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch

import fastloader
from fastloader import open_dataset
from fastloader.pack.cli.main import main
from helpers import coco_file, train_transforms
from imagegen import encode, photo_like

pytestmark = pytest.mark.native
N = 10


def _jpeg(k: int) -> bytes:
    return encode(photo_like(48 + 3 * k, 64 + 2 * k, 40 + k), quality=90)


def _table(root: Path) -> tuple[Any, dict[str, Any]]:
    (root / "img").mkdir(parents=True)
    lines = ["path,kind"]
    for k in range(N):
        (root / "img" / f"{k}.jpg").write_bytes(_jpeg(k))
        lines.append(f"img/{k}.jpg,{'ab'[k % 2]}")
    (root / "t.csv").write_text("\n".join(lines) + "\n")
    return root / "t.csv", {"label": "kind"}


def _tar(root: Path) -> tuple[Any, dict[str, Any]]:
    root.mkdir(parents=True)
    with tarfile.open(root / "w.tar", "w") as tar:
        for k in range(N):
            for name, data in ((f"{k:03d}.jpg", _jpeg(k)), (f"{k:03d}.cls", b"%d" % (k % 3))):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return root / "w.tar", {}


def _coco(root: Path) -> tuple[Any, dict[str, Any]]:
    path = coco_file(root, N)
    for k in range(N):  # the same 40 x 30 frames, as JPEGs (COCO's usual)
        (root / "images" / f"{k:03d}.png").write_bytes(encode(photo_like(30, 40, k)))
    return path, {}


def _python(root: Path) -> tuple[Any, dict[str, Any]]:
    samples = [{"image": _jpeg(k), "label": k % 3} for k in range(N)]
    return samples, {"fields": {"image": "image", "label": "int"}, "shard_samples": 4}


SOURCES = {"table": _table, "tar": _tar, "coco": _coco, "python": _python}


def _batches(dst: Path) -> list[list[Any]]:
    """One pass (fixed seed, random crops and flips), each batch's values cloned."""
    out = []
    with fastloader.FastLoader(dst, batch_size=4, shuffle=True, seed=7, device="cpu",
                               transforms=train_transforms(24)) as loader:
        for batch in loader:
            values = batch.values() if isinstance(batch, dict) else batch
            out.append([v.clone() if isinstance(v, torch.Tensor) else v for v in values])
    return out


def _same(a: list[list[Any]], b: list[list[Any]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(torch.equal(u, v) if isinstance(u, torch.Tensor) else
                                 repr(u) == repr(v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_a_tiled_field_source_loads_the_untiled_packs_pixels(tmp_path: Path, kind: str) -> None:
    src, options = SOURCES[kind](tmp_path / "in")
    plain = tmp_path / "plain.lmdb"
    tiled = tmp_path / "tiled.lmdb"
    fastloader.pack(src, plain, workers=2, shard_size=4000, **options)
    manifest = fastloader.pack(src, tiled, workers=2, shard_size=4000, tiles=True,
                               restart_mcus=2, **options)
    assert manifest.version == 2 and manifest.options["tiles"]["restart_mcus"] == 2
    assert manifest.stats["tiled"] == N and manifest.stats["untiled"] == 0
    with open_dataset(tiled) as ds, open_dataset(plain) as base:
        assert ds.tiled and not base.tiled and len(manifest.shards) >= 2
        assert [ds.record(i) != base.record(i) for i in range(N)] == [True] * N  # repacked
    assert _same(_batches(tiled), _batches(plain))


def test_packdata_tiles_a_table_as_the_api_does(tmp_path: Path) -> None:
    src, _ = _table(tmp_path / "in")
    assert main([str(src), str(tmp_path / "cli.lmdb"), "--label", "kind", "--tiles",
                 "--workers", "1", "--quiet"]) == 0
    fastloader.pack(src, tmp_path / "api.lmdb", label="kind", workers=2, tiles=True)
    with open_dataset(tmp_path / "cli.lmdb") as a, open_dataset(tmp_path / "api.lmdb") as b:
        assert a.tiled and [a.record(i) == b.record(i) for i in range(N)] == [True] * N
