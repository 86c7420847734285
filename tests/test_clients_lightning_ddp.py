"""Lightning's own DDP (2 CPU processes over gloo) with loaders built before fit() starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

pytest.importorskip("lightning.pytorch", reason="lightning is a test dependency")

SAMPLES = 12  # one image per class: a label names its sample

# Run as a script: Lightning's DDP launcher starts rank 1 by running the same command again.
SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch
    from torch import nn
    import lightning.pytorch as pl
    from fastloader.decode.augment import CenterCrop
    from fastloader.loader.loader import FastLoader
    from torch.utils.data import Dataset

    path, out = sys.argv[1], sys.argv[2]

    class Numbers(Dataset):
        def __len__(self):
            return 12
        def __getitem__(self, i):
            return torch.zeros(3, 4, 4), i

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 12)
            self.seen = {"packed": [], "dropin": []}
        def training_step(self, batch, _):
            images, labels = batch
            self.seen["packed"] += labels.tolist()
            return nn.functional.cross_entropy(self.layer(images.mean((2, 3))), labels)
        def validation_step(self, batch, _):
            self.seen["dropin"] += batch[1].tolist()
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    # Built before fit(): no process group exists yet in either process.
    train = FastLoader(path, batch_size=2, shuffle=True, transforms=[CenterCrop(8)],
                       num_threads=1, device="cpu", normalize=((0.5,) * 3, (0.25,) * 3))
    val = FastLoader(Numbers(), batch_size=2, num_workers=0)
    model = Net()
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    with open(f"{out}.{trainer.global_rank}.json", "w") as f:
        json.dump(model.seen, f)
""")


pytestmark = [pytest.mark.heavy, pytest.mark.native_neutral]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lightning_ddp")
    make_tree(root / "tree", classes=SAMPLES, per_class=1, size=(20, 24))
    pack(root / "tree", root / "data.lmdb", workers=1, quiet=True)
    return root / "data.lmdb"


def test_lightning_ddp_ranks_read_disjoint_covering_shares(packed: Path,
                                                           tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    out = tmp_path / "seen"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PL_DISABLE_FORK": "1"}
    done = subprocess.run([sys.executable, str(script), str(packed), str(out)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    ranks = [json.loads(Path(f"{out}.{r}.json").read_text()) for r in (0, 1)]
    for name in ("packed", "dropin"):
        first, second = (r[name] for r in ranks)
        assert len(first) == len(second) == SAMPLES // 2, name
        assert set(first).isdisjoint(second), name
        assert set(first) | set(second) == set(range(SAMPLES)), name
