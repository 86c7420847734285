"""FastLoader(...) picks one of three loaders from its arguments; each is a FastLoader."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

import fastloader
from fastloader.loader import packed
from fastloader.loader.dropin import DropInLoader
from fastloader.loader.loader import FastLoader
from fastloader.loader.packed import PackedLoader
from treegen import make_flat_tree

CROP = [fastloader.CenterCrop(16)]


class Numbers(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return i


@pytest.fixture(scope="module")
def packed_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("factory")
    make_flat_tree(root / "src", classes=2, per_class=3)
    fastloader.pack(root / "src", root / "d.lmdb", workers=1)
    return root / "d.lmdb"


def test_packed_path_gives_the_packed_loader(packed_path: Path) -> None:
    with FastLoader(packed_path, batch_size=2, device="cpu", transforms=CROP) as loader:
        assert type(loader) is PackedLoader and isinstance(loader, fastloader.FastLoader)
        assert len(list(loader)) == 3
    dataset = fastloader.open_dataset(packed_path)
    with FastLoader(dataset, batch_size=2, device="cpu", transforms=CROP) as loader:
        assert type(loader) is PackedLoader
    dataset.close()


def test_torch_dataset_gives_the_dropin_loader() -> None:
    loader = FastLoader(Numbers(), batch_size=2, num_workers=0)
    assert type(loader) is DropInLoader and isinstance(loader, FastLoader)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    loader.close()


def test_dali_backend_gives_the_dali_loader(packed_path: Path) -> None:
    pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the [dali] extra)")
    from fastloader.loader.dali import DaliLoader

    with FastLoader(packed_path, batch_size=2, device="cpu", backend="dali",
                    transforms=CROP) as loader:
        assert type(loader) is DaliLoader and isinstance(loader, FastLoader)
        assert len(list(loader)) == 3


def test_unknown_backend_is_refused_before_any_loader_is_built(packed_path: Path) -> None:
    with pytest.raises(fastloader.InvalidArgumentError, match="backend"):
        FastLoader(packed_path, backend="opencv")


def test_the_packed_loader_knows_nothing_of_the_others() -> None:
    source = inspect.getsource(packed)
    for other in ("_delegate", "DropInLoader", "DaliLoader", "loader.dropin", "loader.dali"):
        assert other not in source


PACKED_ONLY_DEFAULTS = {"max_skips": None, "batch_transform": None, "verify_records": False,
                        "fields": None, "multi_hot": None, "padded": False,
                        "decode_images": True, "cache_dir": None, "cache_limit": None,
                        "storage_options": None, "shuffle_window": None, "prefetch_shards": 2}


def test_one_set_of_arguments_serves_every_loader(packed_path: Path) -> None:
    """Packed-only arguments at their defaults are taken by the drop-in and DALI loaders too
    (not a DataLoader TypeError); another value is refused naming the argument."""
    loader = FastLoader(Numbers(), batch_size=2, num_workers=0, **PACKED_ONLY_DEFAULTS)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    loader.close()
    for name in PACKED_ONLY_DEFAULTS:
        with pytest.raises(fastloader.InvalidArgumentError, match=rf"{name}.*packed loader only"):
            FastLoader(Numbers(), batch_size=2, num_workers=0, **{name: 7})


def test_the_dali_loader_takes_packed_only_defaults(packed_path: Path) -> None:
    pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the [dali] extra)")
    with FastLoader(packed_path, batch_size=2, device="cpu", backend="dali", transforms=CROP,
                    **PACKED_ONLY_DEFAULTS) as loader:
        assert len(list(loader)) == 3
    with pytest.raises(fastloader.InvalidArgumentError, match=r"verify_records.*DALI loader"):
        FastLoader(packed_path, batch_size=2, device="cpu", backend="dali", transforms=CROP,
                   verify_records=True)
