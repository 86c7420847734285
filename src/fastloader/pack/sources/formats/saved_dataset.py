"""A Hugging Face `datasets` folder written by save_to_disk (state.json, dataset_info.json and
its .arrow files): loaded with datasets.load_from_disk and packed as that Dataset is (its
features give the fields; Image and Audio columns stored as their bytes). A DatasetDict's
folder (dataset_dict.json and a folder a split) is refused, naming its splits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastloader.errors import PackError
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source

STATE, INFO, SPLITS = "state.json", "dataset_info.json", "dataset_dict.json"


class SavedDataset(Source):
    """datasets.load_from_disk(folder), then pack(dataset)'s reading."""

    name = "savedataset"
    rank = 5

    def detect(self, probe: Probe) -> bool:
        folder = probe.path
        return probe.is_dir and (((folder / STATE).is_file() and (folder / INFO).is_file())
                                 or (folder / SPLITS).is_file())

    def open(self, src: str, opening: Opening) -> Opened:
        from fastloader.pack.sources.hf_dataset import dataset_samples

        folder = Path(src).expanduser().absolute()
        _refuse_splits(folder)
        if not (folder / STATE).is_file():
            raise PackError(f"{folder}: no {STATE}; a datasets save_to_disk folder holds "
                            f"{STATE}, {INFO} and its .arrow files.")
        try:
            import datasets  # type: ignore[import-untyped]
        except ImportError:
            raise PackError(f"{folder} is a Hugging Face datasets folder (save_to_disk); "
                            "reading it needs the datasets package: pip install "
                            "datasets.") from None
        dataset = datasets.load_from_disk(str(folder))
        samples, specs = dataset_samples(dataset, opening.fields, opening.image,
                                         opening.label, opening.root)
        return samples, specs, {"kind": self.name, "path": str(folder)}

    def files(self, path: str) -> list[Path]:
        return sorted(p for p in Path(path).iterdir() if p.is_file())


def _refuse_splits(folder: Path) -> None:
    if not (folder / SPLITS).is_file():
        return
    try:
        splits: Any = json.loads((folder / SPLITS).read_text()).get("splits", [])
    except (OSError, ValueError, AttributeError):
        splits = []
    first = splits[0] if splits else "train"
    raise PackError(f"{folder} is a saved DatasetDict (splits: {', '.join(splits) or '?'}); "
                    f"pack one split's folder, e.g. {folder / first}.")
