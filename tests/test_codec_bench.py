"""benchmarks/bench_codec.py runs end to end on a few images (its numbers are not checked)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from imagegen import encode, photo_like

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
bench_codec = pytest.importorskip(
    "bench_codec", reason="bench_codec imports fastloader._core: the extension is not built")

pytestmark = pytest.mark.native


def test_per_core_rows_and_encode_cost_are_measured() -> None:
    from fastloader.decode import coeffs

    jpegs = [encode(photo_like(60 + 7 * k, 80 + 5 * k, seed=k), "JPEG", "RGB", quality=90)
             for k in range(4)]
    records = [coeffs.encode(j) for j in jpegs]
    rows = bench_codec.per_core(jpegs, records, rounds=2)
    for name in ("jpeg full", "coeffs full", "jpeg crop", "coeffs crop"):
        assert rows[name] > 0
    assert rows["speedup full"] > 0 and rows["speedup crop"] > 0
    cost = bench_codec.encode_cost(jpegs)
    assert cost["encode ms"] > 0 and cost["check decode ms"] > 0


def test_pack_rows_time_both_codecs_in_the_same_rounds(tmp_path: Path) -> None:
    tree = tmp_path / "tree" / "a"
    tree.mkdir(parents=True)
    for k in range(3):
        (tree / f"{k}.jpg").write_bytes(encode(photo_like(40, 48, seed=k), "JPEG", "RGB"))
    rows = bench_codec.pack_rows(tree.parent, tmp_path, rounds=2)
    assert len(rows["pack jpeg s"]) == len(rows["pack coeffs s"]) == 2
    assert all(r > 0 for r in rows["coeffs/jpeg files/s, same round"])


def test_scaled_rows_measure_agreement_and_speed() -> None:
    """benchmarks/bench_codec_scaled.py: every denominator's agreement row, and speed rows whose
    decodes the JPEG path scales (records now equal to it: MAE 0 after)."""
    bench_scaled = pytest.importorskip("bench_codec_scaled")
    from fastloader.decode import coeffs

    jpegs = [encode(photo_like(340 + 9 * k, 460 + 5 * k, seed=k), "JPEG", "RGB", quality=90)
             for k in range(3)]
    rows = bench_scaled.agreement(jpegs, [coeffs.encode(j) for j in jpegs])
    for d in (2, 4, 8):
        assert rows[f"1/{d} after"]["crops"] == 3
        assert rows[f"1/{d} after"]["max |diff|"] == 0
    speed = bench_scaled.speed(bench_scaled.workloads(jpegs, {"big": jpegs[:1]}), rounds=2)
    for size, d in ((56, 2), (28, 4), (14, 8)):  # 340-358 pixels high: 3d x size <= 336
        assert speed[f"tree whole -> {size}x{size}"]["denominators"] == {d: 3}
    assert all(row["jpeg ms"] > 0 and row["coeffs ms"] > 0 for row in speed.values())
