"""PyTorch Lightning saves and restores a FastLoader's state: a fit stopped mid-epoch with a
step checkpoint, then fit(ckpt_path=...) gives the batches the whole run would have; and a
checkpoint of Lightning's own 2-rank DDP resumes on 1 rank (CPU, gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader import FastLoader
from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

pl = pytest.importorskip("lightning.pytorch", reason="lightning is a test dependency")

SAMPLES = 24  # one image per class: a label names its sample
OPTIONS: dict[str, Any] = {"batch_size": 2, "shuffle": True, "seed": 4, "num_threads": 1,
                           "device": "cpu",
                           "transforms": [RandomResizedCrop(8), RandomHorizontalFlip()]}

# The model, the loader and the fit, run here and (for DDP) as a script: Lightning's DDP
# launcher starts rank 1 by running the same command again.
FIT = textwrap.dedent("""
    import json, sys
    import torch
    from torch import nn
    import lightning.pytorch as pl
    from fastloader import FastLoader

    class Recorder(pl.LightningModule):
        '''Records each training batch: (epoch, labels, a checksum of its pixels).'''

        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)
            self.seen = []

        def training_step(self, batch, _):
            images, labels = batch
            self.seen.append([self.current_epoch, labels.tolist(), float(images.sum())])
            return self.layer(images.float().mean((2, 3))).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def fit(path, options, devices, folder, max_steps=-1, ckpt_path=None):
        loader = FastLoader(path, **options)  # built before fit(): no process group yet
        model = Recorder()
        save = pl.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=4,
                                            save_top_k=-1)
        trainer = pl.Trainer(accelerator="cpu", devices=devices,
                             strategy="ddp" if devices > 1 else "auto", max_epochs=2,
                             max_steps=max_steps, logger=False, callbacks=[save],
                             enable_progress_bar=False, enable_model_summary=False,
                             num_sanity_val_steps=0)
        trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt_path)
        return model.seen, trainer.global_rank
""")

SCRIPT = FIT + textwrap.dedent("""
    from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop

    path, folder, out = sys.argv[1:4]
    options = json.loads(sys.argv[4])  # OPTIONS, less its transforms: the same ones here
    options["transforms"] = [RandomResizedCrop(8), RandomHorizontalFlip()]
    seen, rank = fit(path, options, 2, folder, max_steps=4)
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump(seen, f)
""")

_fit: dict[str, Any] = {}
exec(compile(FIT, "elastic_lightning_fit", "exec"), _fit)


pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("elastic_lightning")
    make_tree(root / "tree", classes=SAMPLES, per_class=1, size=(12, 16))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def fit(*args: Any, **kwargs: Any) -> list[list[Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Lightning's advice on num_workers etc.
        seen, _ = _fit["fit"](*args, **kwargs)
    return seen


def checkpoint(folder: Path) -> Path:
    (ckpt,) = folder.glob("*.ckpt")
    assert ckpt.name == "epoch=0-step=4.ckpt"  # mid-epoch: 4 of 12 (or of 6 a rank)
    return ckpt


def test_fit_resumed_from_a_mid_epoch_checkpoint_gives_the_same_batches(
        named: Path, tmp_path: Path) -> None:
    whole = fit(str(named), OPTIONS, 1, tmp_path / "whole")
    assert len(whole) == 2 * SAMPLES // 2
    head = fit(str(named), OPTIONS, 1, tmp_path / "stopped", max_steps=4)
    assert head == whole[:4]
    ckpt = checkpoint(tmp_path / "stopped")
    assert torch.load(ckpt, weights_only=False)["loops"]["fit_loop"]["state_dict"][
        "combined_loader"][0]["batches_done"] == 4  # Lightning saved the loader's state
    rest = fit(str(named), OPTIONS, 1, tmp_path / "resumed", ckpt_path=str(ckpt))
    assert rest == whole[4:]  # the same samples, crops and flips, epoch by epoch


def test_a_two_rank_ddp_checkpoint_resumes_on_one_rank(named: Path, tmp_path: Path) -> None:
    script = tmp_path / "fit_ddp.py"
    script.write_text(SCRIPT)
    out = tmp_path / "seen"
    options = {k: v for k, v in OPTIONS.items() if k != "transforms"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PL_DISABLE_FORK": "1"}
    done = subprocess.run([sys.executable, str(script), str(named), str(tmp_path / "ddp"),
                           str(out), json.dumps(options)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    head = [lab for r in (0, 1) for _, labels, _ in json.loads(
        Path(f"{out}.{r}.json").read_text()) for lab in labels]
    assert len(head) == len(set(head)) == 2 * 4 * 2  # 2 ranks, 4 steps of 2
    rest = fit(str(named), OPTIONS, 1, tmp_path / "resumed",
               ckpt_path=str(checkpoint(tmp_path / "ddp")))
    first = [lab for epoch, labels, _ in rest if epoch == 0 for lab in labels]
    assert sorted(head + first) == list(range(SAMPLES))  # the rest of epoch 0, once each
    with FastLoader(named, **OPTIONS) as fresh:  # then epoch 1 of a fresh 1-rank run
        fresh.set_epoch(1)
        expected = [[1, labels.tolist(), float(images.sum())] for images, labels in fresh]
    assert [step for step in rest if step[0] == 1] == expected
