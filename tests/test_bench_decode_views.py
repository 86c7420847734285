"""benchmarks/bench_decode_views.py runs end to end on a few images (numbers not checked)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

pytestmark = pytest.mark.native  # tiles and coeffs records are made natively


def test_every_codec_gets_its_three_ways_and_ratios() -> None:
    import bench_decode_views

    result = bench_decode_views.run(images=4, batch_size=2, rounds=1, threads=1)
    assert set(result["codecs"]) == {"jpeg", "tiles", "coeffs"}
    for row in result["codecs"].values():
        assert set(row["medians"]) == {"views", "separate", "one view", "views + ops"}
        assert all(m["cpu_ms"] >= 0 and m["wall_ms"] > 0 for m in row["medians"].values())
        assert row["ratios"]["separate_over_views"] > 0
    assert "separate / views" in bench_decode_views.table(result)
