"""Field kinds live in format/kinds/: what the rest of the package still compares kind names
against is counted (at most 15), and a kind registered from outside the package (a toy one,
here) goes through pack -> open -> verify -> collate with no other module knowing it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fastloader
from fastloader import FastLoader, open_dataset
from fastloader.errors import DatasetError, PackError
from fastloader.format import kinds
from fastloader.format.kinds.base import BadValue, Fixed
from fastloader.pack.maintain.verify import verify
from imagegen import encode, photo_like
from kind_names import kind_comparisons

PACKAGE = Path(fastloader.__file__).parent
KINDS_PACKAGE = PACKAGE / "format" / "kinds"
BUDGET = 15  # issue 26: at most 15 string comparisons of kinds outside format/kinds/

def test_few_kind_comparisons_remain_outside_the_kinds_package() -> None:
    found = kind_comparisons(PACKAGE, skip=KINDS_PACKAGE)
    assert len(found) <= BUDGET, "\n".join(found)


def test_the_count_sees_every_spelling_of_a_kind_comparison(tmp_path: Path) -> None:
    (tmp_path / "planted.py").write_text(
        'BOXES = "boxes"\n'
        'def f(spec, kinds, k):\n'
        '    a = spec.kind == "boxes"\n'
        '    b = spec.kind in ("text", "json")\n'
        '    c = spec.kind is kinds.MASK\n'
        '    d = k != BOXES\n'
        '    e = spec.name == "caption" or len(k) > 2\n'  # not a kind: not counted
        '    return a, b, c, d, e\n')
    found = kind_comparisons(tmp_path)
    assert [line.split(": ", 1)[1] for line in found] == [
        "spec.kind == 'boxes'", "spec.kind in ('text', 'json')", "spec.kind is kinds.MASK",
        "k != BOXES"]


class PointKind(Fixed):
    """A toy kind: one finite (x, y) per sample, float32 (2,), a tensor [B, 2] in a batch."""

    is_array = True
    verified = True

    def __init__(self, name: str) -> None:
        self.verified_values: list[tuple[float, float]] = []

    def build(self, name: str, entry: Any, bad: type[Exception], where: str) -> dict[str, Any]:
        return {"dtype": "float32", "shape": (2,)}

    def store(self, spec: Any, value: Any, ctx: Any) -> np.ndarray:
        point = np.asarray(value, np.float32)
        if point.shape != (2,) or not np.isfinite(point).all():
            raise BadValue(f"expected a finite (x, y), got {value!r:.40}")
        return point

    def verify(self, spec: Any, value: Any, image_size: Any, decode: Any) -> str | None:
        self.verified_values.append((float(value[0]), float(value[1])))
        return None


@pytest.fixture()
def point() -> Iterator[PointKind]:
    kind = kinds.register(PointKind("point"))
    yield kind
    kinds.unregister("point")


def _samples(n: int) -> list[dict[str, Any]]:
    return [{"image": encode(photo_like(12, 14, k)), "pt": (k, -k / 2)} for k in range(n)]


def test_a_registered_kind_packs_opens_verifies_and_collates(point: PointKind,
                                                             tmp_path: Path) -> None:
    dst = tmp_path / "points.lmdb"
    fastloader.pack(_samples(6), dst, fields={"image": "image", "pt": "point"}, workers=2)
    entry = json.loads((dst / "manifest.json").read_text())["sample_fields"][1]
    assert entry == {"name": "pt", "kind": "point"}
    with open_dataset(dst) as ds:
        assert ds.fields["pt"].kind is point
        np.testing.assert_array_equal(ds.sample(3)["pt"], np.float32([3, -1.5]))
    report = verify(dst)
    assert report.ok, report.problems
    assert report.values_checked == 6 and point.verified_values[5] == (5.0, -2.5)
    with FastLoader(dst, batch_size=4, device="cpu", num_threads=1, fields=["pt"]) as loader:
        (points,) = next(iter(loader))
    assert points.dtype == torch.float32 and points.shape == (4, 2)
    assert points.tolist() == [[k, -k / 2] for k in range(4)]


def test_a_registered_kind_refuses_a_bad_value_and_is_needed_to_open(
        point: PointKind, tmp_path: Path) -> None:
    bad = _samples(3)
    bad[1]["pt"] = (1.0, float("nan"))
    with pytest.raises(PackError, match=r"field 'pt' \(point\): expected a finite \(x, y\)"):
        fastloader.pack(bad, tmp_path / "bad.lmdb", fields={"image": "image", "pt": "point"},
                        workers=1)
    dst = tmp_path / "ok.lmdb"
    fastloader.pack(_samples(3), dst, fields={"image": "image", "pt": "point"}, workers=1)
    kinds.unregister("point")
    with pytest.raises(DatasetError, match="has kind"):
        open_dataset(dst)
