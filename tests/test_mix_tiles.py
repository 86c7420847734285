"""A mix's tile batch (format/mixed.py): each source's rows gathered at once, the same arrays
TileBatch.from_tables builds from the records' tile tables one by one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fastloader.decode.tiles import TileBatch
from fastloader.format.mixed import MixedDataset
from fastloader.format.open import open_dataset
from fastloader.pack.pipeline.tree import pack


@pytest.mark.native  # pack(tiles=True) scans the JPEGs natively
def test_a_mix_tile_batch_is_its_records_tile_tables(
    tmp_path: Path, mixed_tree: tuple[Path, dict[str, bytes]]
) -> None:
    src = mixed_tree[0]
    pack(src, tmp_path / "tiled.lmdb", tiles=True, workers=1)
    pack(src, tmp_path / "plain.lmdb", workers=1)
    sources = [open_dataset(tmp_path / name) for name in ("plain.lmdb", "tiled.lmdb")]
    with MixedDataset(sources, ["plain", "tiled"]) as mix:
        rng = np.random.default_rng(0)
        ids = rng.integers(0, len(mix), 40)  # both sources, out of order, repeats
        assert {int(s) for s in mix.source_of(ids)} == {0, 1}
        got = mix.tile_batch(ids)
        want = TileBatch.from_tables([mix.tile_table(int(i)) for i in ids])
        assert got is not None and want.headers.any()  # some records are tiled, some not
        for name in ("headers", "offsets", "spans"):
            g, w = getattr(got, name), getattr(want, name)
            assert g.dtype == w.dtype and np.array_equal(g, w), name
        with pytest.raises(IndexError, match="out of range"):
            mix.tile_batch([0, len(mix)])
