"""Remote and sampling options that cannot work together are refused, never dropped; a dataset
packed to a file:// URL uploads (parent folders made) and verifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastloader.errors import InvalidArgumentError
from fastloader.format.open import open_dataset
from fastloader.loader.loader import FastLoader
from fastloader.pack.cli.main import main as packdata
from helpers import packed_tree, train_transforms
from imagegen import make_tree

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")

OPTIONS = {"batch_size": 4, "transforms": train_transforms(), "num_threads": 1,
           "device": "cpu"}


def test_options_that_contradict_each_other_are_refused(dataset_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="shuffle_window"):
        FastLoader(dataset_path, sampler=[0, 1, 2], shuffle_window=2, **OPTIONS)
    with pytest.raises(InvalidArgumentError, match=r"prefetch_shards.*URL only"):
        FastLoader(dataset_path, prefetch_shards=5, **OPTIONS)


def test_a_sampler_on_a_url_cannot_take_a_cache_limit(served) -> None:
    url, _, tmp = served
    with pytest.raises(InvalidArgumentError, match=r"cache_limit.*sampler"):
        FastLoader(url, sampler=list(range(8)), cache_dir=tmp / "cache",
                   cache_limit=10**9, **OPTIONS)


def test_packdata_to_a_file_url_uploads_and_verifies(tmp_path: Path, capsys,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTLOADER_CACHE_DIR", str(tmp_path / "cache"))  # verify's cache
    make_tree(tmp_path / "tree", classes=2, per_class=5, size=(24, 28))
    url = f"file://{tmp_path}/bucket/deep/d.lmdb"  # parents that do not exist yet
    assert packdata([str(tmp_path / "tree"), url, "--workers", "1", "--quiet",
                     "--staging", str(tmp_path / "staging")]) == 0, capsys.readouterr().err
    assert packdata(["verify", url]) == 0
    with open_dataset(url, cache_dir=tmp_path / "cache") as ds:
        assert len(ds) == 10


def test_a_callers_dataset_keeps_its_record_check(tmp_path: Path) -> None:
    path = packed_tree(tmp_path / "src", classes=2, per_class=4)
    with open_dataset(path) as ds:
        ds.verify_records = True
        with FastLoader(ds, **OPTIONS):  # verify_records=False by default: not imposed
            assert ds.verify_records


def test_info_counts_skips_without_skipped_json(tmp_path: Path) -> None:
    """A dataset read from a URL has no skipped.json in its cache: the manifest's count
    stands in (here: the file removed from a local dataset with two unreadable files)."""
    from fastloader.pack.maintain.info import dataset_info

    make_tree(tmp_path / "tree", classes=2, per_class=3, size=(24, 28))
    for k in range(2):
        (tmp_path / "tree" / f"class_{k}" / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    path = packed_tree_from(tmp_path / "tree", tmp_path / "d.lmdb")
    assert dataset_info(path)["skipped"] == 2
    (path / "skipped.json").unlink()
    assert dataset_info(path)["skipped"] == 2


def packed_tree_from(tree: Path, dst: Path) -> Path:
    from fastloader.pack.pipeline.tree import pack

    pack(tree, dst, workers=1, quiet=True, skip_bad=True)
    return dst


def test_open_dataset_takes_none_for_the_url_options(dataset_path: Path) -> None:
    with open_dataset(dataset_path, cache_dir=None, cache_limit=None) as ds:  # "not given"
        assert len(ds) > 0
    with pytest.raises(InvalidArgumentError, match=r"cache_dir.*URL only"):
        open_dataset(dataset_path, cache_dir="somewhere")
