"""The DALI loader accepts and refuses jpeg_edits' files as the packed native loader does, with its
pixels; a refused record raises naming it and its path, or is replaced under on_error="skip"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fastloader.decode.augment import CenterCrop
from fastloader.decode.jpeg_headers import pillow_framed
from fastloader.errors import DecodeError
from fastloader.format.open import open_dataset
from fastloader.loader.dali.pipeline import dali_available
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from jpeg_edits import REFUSED, WARNINGS, bases

needs_dali = pytest.mark.skipif(
    not dali_available(),
    reason='NVIDIA DALI is not importable here: pip install "fastloader[dali]" to run these',
)
BASES = bases()
# case name -> (edited bytes, whether Pillow decodes it); every edit that changes its base.
CASES = {f"{name}-{edit.name}": (edit.apply(base), edit.decodes)
         for name, base in BASES.items() for edit in (*WARNINGS, *REFUSED)
         if edit.apply(base) != base}
WHOLE = [CenterCrop((61, 83))]  # the whole image, unresized: a refusal is sure for whole reads


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A class per case (so a label names its record), each holding the case's valid base."""
    root = tmp_path_factory.mktemp("dali_warnings")
    for case in CASES:
        (root / "tree" / case).mkdir(parents=True)
        base = BASES[next(name for name in BASES if case.startswith(f"{name}-"))]
        (root / "tree" / case / "image.jpg").write_bytes(base)
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def _edited(packed: Path, only: str | None = None) -> Any:
    """The packed dataset with each record (or only `only`'s) read as its case's edited file
    (the seam the loader-error tests use: a record the packer would have refused)."""
    dataset = open_dataset(packed)
    good = dataset.record

    def record(i: int, verify: bool = False) -> object:
        case = dataset.path(i).split("/")[0]
        return CASES[case][0] if only in (None, case) else good(i)

    dataset.record = record
    return dataset


@pytest.fixture
def edited(packed: Path) -> Iterator[Any]:
    dataset = _edited(packed)
    yield dataset
    dataset.close()


def _pass(dataset: Any, backend: str, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
    extra = {"num_threads": 1} if backend == "dali" else {}
    with FastLoader(dataset, batch_size=4, backend=backend, device="cpu",
                    **{"transforms": WHOLE, "on_error": "skip", **extra, **kwargs}) as loader:
        batches = list(loader)
        stats = loader.stats()
    return torch.cat([i for i, _ in batches]), torch.cat([lab for _, lab in batches]), stats


@needs_dali
@pytest.mark.native
def test_dali_keeps_and_replaces_what_the_native_loader_does(edited: Any) -> None:
    n_images, n_labels, n_stats = _pass(edited, "native")
    d_images, d_labels, d_stats = _pass(edited, "dali")
    own = torch.from_numpy(edited.labels.astype(np.int64))
    refused = {edited.path(i).split("/")[0] for i in range(len(edited)) if n_labels[i] != own[i]}
    assert refused == {case for case, (_, decodes) in CASES.items() if not decodes}
    assert torch.equal(d_labels, n_labels)  # same records replaced, by the same replacements
    assert d_stats.skipped == n_stats.skipped == len(refused)
    for i in range(len(edited)):  # DALI's and libjpeg-turbo's IDCT/upsampling differ slightly
        difference = (d_images[i].float() - n_images[i].float()).abs().mean()
        assert difference < 4.0, edited.path(i)


@needs_dali
@pytest.mark.parametrize("case", [c for c, (_, decodes) in CASES.items() if not decodes])
def test_a_refused_record_raises_naming_it(packed: Path, case: str) -> None:
    dataset = _edited(packed, only=case)
    bad = next(i for i in range(len(dataset)) if dataset.path(i).startswith(f"{case}/"))
    delivered = 0
    with pytest.raises(DecodeError) as caught, _loader(dataset) as loader:
        for _ in loader:
            delivered += 1
    message = str(caught.value)
    assert f"record {bad}" in message and dataset.path(bad) in message
    assert f"batch {bad // 4}" in message and "on_error='skip'" in message
    assert delivered == bad // 4  # the batches before it came first
    dataset.close()


def _loader(dataset: Any) -> Any:
    return FastLoader(dataset, batch_size=4, backend="dali", device="cpu", num_threads=1,
                      transforms=WHOLE)


def test_reframing_only_drops_what_pillow_skips() -> None:
    base = BASES["ycbcr-420-base"]
    assert pillow_framed(base) is base  # a clean header: the record itself, no copy
    for case in ("extraneous-bytes-before-dqt", "ff00-after-soi", "app13-length-short-of-its-data",
                 "app14-length-short-of-its-data"):
        data = CASES[f"ycbcr-420-base-{case}"][0]
        framed = pillow_framed(data)
        scan = base[base.index(b"\xff\xda"):]
        assert framed != data and framed[framed.index(b"\xff\xda"):] == scan
    for case in ("junk-right-after-soi", "app14-truncated-to-6-bytes", "tem-marker-in-header",
                 "jfif-app0-truncated-to-6-bytes", "truncated-in-header"):
        with pytest.raises(DecodeError):
            pillow_framed(CASES[f"ycbcr-420-base-{case}"][0])


@needs_dali
def test_dali_alone_names_what_it_refuses() -> None:
    from fastloader.loader.dali.pipeline import dali_refuses

    assert dali_refuses(BASES["gray-base"]) is None
    assert dali_refuses(CASES["gray-base-truncated-at-50%-of-data"][0])


@needs_dali
def test_skips_past_max_skips_raise_naming_them(edited: Any) -> None:
    with pytest.raises(DecodeError, match=r"more than max_skips=2 allows") as caught:
        _pass(edited, "dali", max_skips=2)
    assert str(caught.value).count("record ") >= 3
