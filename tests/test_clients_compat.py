"""What DataLoader users expect of FastLoader: attributes, the pass rule, errors, peeking."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from fastloader.decode.augment import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize
from fastloader.errors import FastloaderError
from fastloader.loader.factory.pass_dataset import collate_rows
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from fastloader.pack.sources.scan import scan
from imagegen import make_tree

TRAIN = [RandomResizedCrop(24), RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compat")
    make_tree(root / "tree", classes=3, per_class=6, size=(30, 40))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def labels_of(loader: FastLoader, limit: int | None = None) -> list[list[int]]:
    out = []
    for step, (_, labels) in enumerate(loader):
        if limit is not None and step == limit:
            break
        out.append(labels.tolist())
    return out


# -- item 5: the DataLoader attributes clients read -------------------------------------------

def test_packed_loader_has_the_dataloader_attributes(packed: Path) -> None:
    with FastLoader(packed, batch_size=4, transforms=TRAIN, device="cpu") as loader:
        assert loader.batch_sampler is None  # it batches itself
        assert loader.sampler is not None and hasattr(loader.sampler, "set_epoch")
        assert (loader.num_workers, loader.pin_memory) == (0, False)
        assert loader.collate_fn is collate_rows  # a batch's samples back into that batch
        assert (loader.prefetch_factor, loader.persistent_workers, loader.generator) == (
            None, False, None)
        assert (loader.batch_size, loader.drop_last) == (4, False)
        assert len(loader.dataset) == 18


class Numbers(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> int:
        return i


def test_dropin_loader_forwards_the_dataloader_attributes() -> None:
    def collate(batch: list[int]) -> torch.Tensor:
        return torch.tensor(batch)

    loader = FastLoader(Numbers(), batch_size=3, drop_last=True, num_workers=0,
                        collate_fn=collate)
    inner = loader.loader
    for name in ("dataset", "batch_size", "drop_last", "num_workers", "collate_fn",
                 "pin_memory", "prefetch_factor", "persistent_workers", "generator",
                 "sampler", "batch_sampler", "timeout", "worker_init_fn"):
        assert getattr(loader, name) is getattr(inner, name), name
    assert loader.batch_size == 3 and loader.drop_last is True and loader.collate_fn is collate
    with pytest.raises(AttributeError):
        _ = loader.no_such_attribute


# -- item 4: a pass cut short -----------------------------------------------------------------

def test_a_pass_cut_short_is_followed_by_the_next_epoch(packed: Path) -> None:
    options = {"batch_size": 3, "shuffle": True, "transforms": TRAIN, "device": "cpu",
               "num_threads": 1}
    with FastLoader(packed, **options) as loader, FastLoader(packed, **options) as ref:
        epoch0 = labels_of(ref)
        epoch1 = labels_of(ref)  # a full pass advances the epoch
        assert labels_of(loader, limit=2) == epoch0[:2]  # break after 2 batches
        # Like DataLoader, the next iter() reshuffles: it does not repeat the cut pass.
        assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batches_done"] == 0
        assert labels_of(loader) == epoch1
        # set_epoch() chooses the next pass explicitly, cut short or not.
        labels_of(loader, limit=1)
        loader.set_epoch(0)
        assert labels_of(loader) == epoch0


def test_resume_after_a_cut_pass_is_exact(packed: Path) -> None:
    options = {"batch_size": 3, "shuffle": True, "transforms": TRAIN, "device": "cpu",
               "num_threads": 1}
    with FastLoader(packed, **options) as loader:
        labels_of(loader, limit=2)
        state = loader.state_dict()  # no pass running: it names the pass iter() starts next
        expected = labels_of(loader)
    with FastLoader(packed, **options) as again:
        again.load_state_dict(state)
        assert labels_of(again) == expected


# -- item 6: errors that name the real cause ----------------------------------------------------

def test_a_typo_is_named_with_the_argument_meant(packed: Path) -> None:
    with pytest.raises(FastloaderError, match=r"shufle=True .*not an argument.*shuffle="):
        FastLoader(packed, batch_size=2, shufle=True, transforms=TRAIN)
    with pytest.raises(FastloaderError, match="is a DataLoader argument"):
        FastLoader(packed, batch_size=2, num_workers=4, transforms=TRAIN)


def test_resize_on_mixed_shapes_names_the_transform_and_the_fix(packed: Path) -> None:
    with pytest.raises(FastloaderError) as caught:
        FastLoader(packed, batch_size=2, transforms=[Resize(16)])
    message = str(caught.value)
    assert "transforms=None" not in message
    assert "Resize(size=16)" in message and "CenterCrop(16)" in message


# -- item 8: peeking at one batch ----------------------------------------------------------------

@pytest.mark.parametrize("backend", ["auto", "dali"])
def test_next_iter_peeks_at_a_batch(packed: Path, backend: str) -> None:
    if backend == "dali":
        pytest.importorskip("nvidia.dali", reason="DALI is an optional extra")
    images, labels = next(iter(FastLoader(packed, batch_size=4, backend=backend,
                                          transforms=[CenterCrop(16)], device="cpu")))
    assert images.shape == (4, 3, 16, 16) and labels.shape == (4,)


# -- item 7: the demo's own stamp file is not reported as an ignored file ---------------------

def test_demo_tree_has_no_file_that_packdata_ignores(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import make_images
    finally:
        sys.path.pop(0)
    tree = tmp_path / "images"
    assert make_images.ensure_tree(tree, 4, classes=2) is True
    result = scan(tree)
    assert (result.ignored_hidden, result.ignored_non_image,
            result.ignored_outside_classes) == (0, 0, 0)
    assert make_images.ensure_tree(tree, 4, classes=2) is False  # still reused


# -- a loader built under torchrun before init_process_group ----------------------------------

def test_threads_are_shared_by_the_ranks_a_launcher_announced(
        packed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastloader.loader.order.sampler import usable_cores

    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets them, before the group exists
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with FastLoader(packed, batch_size=2, transforms=TRAIN, num_threads=None,
                    device="cpu") as loader:
        assert loader.num_threads == max(1, usable_cores() // 2)
        assert loader.sampler.world_size == 1  # no process group yet: sharding waits for it
    dropin = FastLoader(Numbers(), batch_size=2)
    assert dropin.num_workers == max(1, usable_cores() // 2)
    dropin.close()
