"""A real PyTorch Lightning Trainer: fit with validation, then validate, test and predict."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fastloader.decode.augment import CenterCrop, RandomHorizontalFlip, RandomResizedCrop
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

pl = pytest.importorskip("lightning.pytorch", reason="lightning is a test dependency")

NORMALIZE = ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lightning")
    make_tree(root / "tree", classes=3, per_class=8, size=(40, 52))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


class TinyNet(pl.LightningModule):  # type: ignore[misc]
    """Enough of a model to run every Trainer entry point; records what each step saw."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(4, 3))
        self.seen: dict[str, int] = {}

    def _step(self, batch: Any, stage: str) -> torch.Tensor:
        images, labels = batch
        assert images.dtype == torch.float32 and images.shape[1:] == (3, 32, 32)
        self.seen[stage] = self.seen.get(stage, 0) + 1
        loss = nn.functional.cross_entropy(self.net(images), labels)
        self.log(f"{stage}_loss", loss, batch_size=len(labels))
        return loss

    def training_step(self, batch: Any, _: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Any, _: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Any, _: int) -> None:
        self._step(batch, "test")

    def predict_step(self, batch: Any, _: int) -> torch.Tensor:
        self.seen["predict"] = self.seen.get("predict", 0) + 1
        return self.net(batch[0]).argmax(1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(**kwargs: Any) -> Any:
    return pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, **kwargs)


def run_all_entry_points(train: Any, val: Any) -> TinyNet:
    model = TinyNet()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Lightning's advice on num_workers etc.
        trainer(max_epochs=2, limit_train_batches=4, limit_val_batches=2).fit(
            model, train_dataloaders=train, val_dataloaders=val)
        trainer().validate(model, dataloaders=val, verbose=False)
        trainer().test(model, dataloaders=val, verbose=False)
        predictions = trainer().predict(model, dataloaders=val)
    assert predictions is not None and sum(len(p) for p in predictions) == 24
    return model


def test_lightning_runs_every_entry_point_on_a_packed_loader(packed: Path) -> None:
    train = FastLoader(packed, batch_size=4, shuffle=True, num_threads=2, device="cpu",
                       transforms=[RandomResizedCrop(32), RandomHorizontalFlip()],
                       normalize=NORMALIZE)
    val = FastLoader(packed, batch_size=6, num_threads=2, device="cpu",
                     transforms=[CenterCrop(32)], normalize=NORMALIZE)
    with train, val:
        model = run_all_entry_points(train, val)
        # 2 epochs of 4 train batches (limit_train_batches cuts each pass short), the sanity
        # check's 2 val batches, 2 per epoch, then 4 each for validate and test.
        assert model.seen == {"train": 8, "val": 2 + 2 * 2 + 4, "test": 4, "predict": 4}
        # limit_train_batches cut both passes short; Lightning chose epochs 0 and 1 itself.
        assert train.sampler.epoch == 1


class ImageSet(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A map-style dataset of float images, for the drop-in path."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(i)
        return torch.rand(3, 32, 32, generator=generator), i % 3


def test_lightning_runs_every_entry_point_on_a_dropin_loader() -> None:
    train = FastLoader(ImageSet(), batch_size=4, shuffle=True, num_workers=0)
    val = FastLoader(ImageSet(), batch_size=6, num_workers=0)
    model = run_all_entry_points(train, val)
    assert model.seen == {"train": 8, "val": 2 + 2 * 2 + 4, "test": 4, "predict": 4}
