"""PyTorch Lightning saves and restores a mixed FastLoader's state: a fit over a 1:3 mix of two
packed datasets stopped mid-epoch by a step checkpoint, then fit(ckpt_path=...), gives the
batches the whole run would have (its checkpoint holds the mix's state)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fastloader import FastLoader
from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

pl = pytest.importorskip("lightning.pytorch", reason="lightning is a test dependency")

OPTIONS: dict[str, Any] = {"weights": [1, 3], "batch_size": 2, "shuffle": True, "seed": 4,
                           "num_threads": 1, "device": "cpu",
                           "transforms": [RandomResizedCrop(8), RandomHorizontalFlip()]}


class Recorder(pl.LightningModule):
    """Records each training batch: (epoch, labels, a checksum of its pixels)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.seen: list[list[Any]] = []

    def training_step(self, batch: Any, _: int) -> torch.Tensor:
        images, labels = batch
        self.seen.append([self.current_epoch, labels.tolist(), float(images.sum())])
        return self.layer(images.float().mean((2, 3))).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(paths: list[str], folder: Path, max_steps: int = -1,
        ckpt_path: str | None = None) -> list[list[Any]]:
    model = Recorder()
    save = pl.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=4, save_top_k=-1)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, max_steps=max_steps,
                         logger=False, callbacks=[save], enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Lightning's advice on num_workers etc.
        trainer.fit(model, train_dataloaders=FastLoader(paths, **OPTIONS), ckpt_path=ckpt_path)
    return model.seen


def test_a_mixed_fit_resumed_mid_epoch_gives_the_same_batches(tmp_path: Path) -> None:
    paths = []
    for name, classes in (("a", 4), ("b", 12)):
        make_tree(tmp_path / name, classes=classes, per_class=1, size=(12, 16))
        pack(tmp_path / name, tmp_path / f"{name}.lmdb", workers=1, quiet=True)
        paths.append(str(tmp_path / f"{name}.lmdb"))
    whole = fit(paths, tmp_path / "whole")
    assert len(whole) == 2 * 16 // 2
    head = fit(paths, tmp_path / "stopped", max_steps=4)
    assert head == whole[:4]
    (ckpt,) = (tmp_path / "stopped").glob("*.ckpt")
    saved = torch.load(ckpt, weights_only=False)["loops"]["fit_loop"]["state_dict"][
        "combined_loader"][0]
    assert saved["batches_done"] == 4 and saved["mix"]["weights"] == [0.25, 0.75]
    assert fit(paths, tmp_path / "resumed", ckpt_path=str(ckpt)) == whole[4:]
