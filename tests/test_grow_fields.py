"""append and merge of format v2 (declared fields) and tiled (--tiles) datasets: every sample
once with every field's value, classes of fields joined by name, tiles kept (verify clean,
the loader decodes the merged copy as it decodes the inputs), differing fields or tiling
refused, and one warning line when classes of the same name are joined."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fastloader import FastLoader
from fastloader.decode.augment import CenterCrop, Resize
from fastloader.errors import PackError
from fastloader.format.dataset import PackedDataset
from fastloader.pack.api import pack as pack_any
from fastloader.pack.maintain.grow import append, merge
from fastloader.pack.maintain.verify import verify
from fastloader.pack.pipeline.tree import pack
from imagegen import encode, make_tree, photo_like


def _fields(classes: list[str]) -> dict[str, Any]:
    return {"image": "image", "label": ("int", classes), "caption": "text",
            "tokens": ("ndarray", "int32", (-1,)), "score": "float"}


def _v2(path: Path, classes: list[str], n: int, tag: str) -> list[dict[str, Any]]:
    samples = [{"image": encode(photo_like(12 + k % 3, 16, k)), "label": k % len(classes),
                "caption": f"{tag}{k}", "tokens": np.arange(k % 4, dtype=np.int32) + k,
                "score": k / 4} for k in range(n)]
    pack_any(samples, path, fields=_fields(classes), workers=1, quiet=True, shard_size=4096)
    return samples


def _rows(path: Path) -> list[tuple[str, str, list[int], float]]:
    with PackedDataset(path) as ds:
        classes = ds.fields["label"].classes or ()
        return [(str(ds.value("caption", i)), classes[int(ds.value("label", i))],
                 ds.value("tokens", i).tolist(), float(ds.value("score", i)))
                for i in range(len(ds))]


def test_v2_datasets_merge_and_append_with_every_field(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    a, b = tmp_path / "a.lmdb", tmp_path / "b.lmdb"
    _v2(a, ["cat", "dog"], 7, "a")
    _v2(b, ["dog", "emu", "fox"], 9, "b")
    want = _rows(a) + _rows(b)
    with caplog.at_level(logging.WARNING, logger="fastloader"):
        merge([a, b], tmp_path / "m.lmdb")
    assert [r.message for r in caplog.records] == [
        "classes of the same name are joined into one class: 1 shared (dog)"]
    assert _rows(tmp_path / "m.lmdb") == want and verify(tmp_path / "m.lmdb").ok
    with PackedDataset(tmp_path / "m.lmdb") as ds:
        assert ds.fields["label"].classes == ("cat", "dog", "emu", "fox")
        assert ds.classes == ["cat", "dog", "emu", "fox"]
    append(a, b)
    assert _rows(a) == want and verify(a).ok
    other = tmp_path / "c.lmdb"
    pack_any([{"image": encode(photo_like(12, 16, 0)), "label": 0, "caption": "x"}], other,
             fields={"image": "image", "label": ("int", ["cat"]), "caption": "text"},
             workers=1, quiet=True)
    with pytest.raises(PackError, match="fields"):
        merge([b, other], tmp_path / "n.lmdb")


@pytest.mark.native  # packing tiles needs the extension
@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_tiled_datasets_merge_with_their_tiles(tmp_path: Path, suffix: str) -> None:
    make_tree(tmp_path / "ta", classes=2, per_class=3, size=(40, 56))
    make_tree(tmp_path / "tb", classes=3, per_class=2, size=(48, 40), seed=3)
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    for tree, dst in ((tmp_path / "ta", a), (tmp_path / "tb", b)):
        pack(tree, dst, workers=1, quiet=True, tiles=True, shard_size=8192)
    merged = tmp_path / f"m{suffix}"
    merge([a, b], merged)
    assert verify(merged).ok
    with PackedDataset(merged) as ds, PackedDataset(a) as da, PackedDataset(b) as db:
        assert ds.tiled and len(ds) == len(da) + len(db)
        tables = [t.to_arrays() for t in (ds.tile_table(i) for i in range(len(ds)))
                  if t is not None]
        inputs = [t.to_arrays() for d in (da, db) for t in
                  (d.tile_table(i) for i in range(len(d))) if t is not None]
        assert len(tables) == len(inputs) == len(ds)
        assert all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
                   for x, y in zip(tables, inputs, strict=True))
    options: dict[str, Any] = {"batch_size": 64, "device": "cpu", "num_threads": 1,
                               "transforms": [Resize(24), CenterCrop(16)]}
    with FastLoader(merged, **options) as one, FastLoader([a, b], **options) as mix:
        (x, y), (u, v) = next(iter(one)), next(iter(mix))  # every sample, in one batch
        order = torch.as_tensor(mix.sampler.indices())  # mix ids are the merged ids
        assert torch.equal(x[order], u) and torch.equal(y[order], v)
    untiled = tmp_path / f"u{suffix}"
    pack(tmp_path / "tb", untiled, workers=1, quiet=True)
    with pytest.raises(PackError, match="tiles"):
        merge([a, untiled], tmp_path / f"n{suffix}")
