"""A loader its own keyword argument chooses (audio=, video=) is declared once, in
loader/factory/paths.py: a toy one registered by the test is built by FastLoader(path, toy=Toy()),
its loader imported on first use, its argument refused elsewhere in FastLoader's words, with
no edit to path_choice, option_paths or the factory."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

import fastloader
from fastloader.loader.factory.base import FastLoader
from fastloader.loader.factory.paths import PATHS
from fastloader.loader.loader import FastLoader as Factory
from tiny_dataset import Numbers
from toyoutput import TOY, Toy

CROP = [fastloader.CenterCrop(16)]


pytestmark = pytest.mark.native_neutral


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy output registered for one test: its registry line, and a FastLoader that has
    not seen its loader (imported again, afresh, when its path is first chosen)."""
    monkeypatch.setitem(PATHS, "toy loader", TOY)
    monkeypatch.setattr(FastLoader, "_paths", dict(FastLoader._paths))
    monkeypatch.delitem(sys.modules, "toyloader", raising=False)


def record_lengths(path: Path, batch: int, offset: int) -> list[list[int]]:
    with fastloader.open_dataset(path) as dataset:
        sizes = [len(dataset.record(i)) + offset for i in range(len(dataset))]
    return [sizes[i:i + batch] for i in range(0, len(sizes), batch)]


def test_a_registered_output_is_built_by_its_argument(dataset_path: Path, toy: None) -> None:
    assert "toyloader" not in sys.modules
    with Factory(dataset_path, 5, toy=Toy(offset=3), seed=1) as loader:
        assert "toyloader" in sys.modules  # imported when its path was chosen
        assert type(loader).__name__ == "ToyLoader" and isinstance(loader, fastloader.FastLoader)
        assert [b.tolist() for b in loader] == record_lengths(dataset_path, 5, 3)
        assert len(loader) == len(record_lengths(dataset_path, 5, 3))
    # its signature is its options class's, as every path's is
    parameters = inspect.signature(type(loader)).parameters
    assert list(parameters) == ["data", "batch_size", "shuffle", "seed", "device", "drop_last",
                                "rank", "world_size", "toy", "dataloader_kwargs"]
    with pytest.raises(fastloader.InvalidTypeError, match=r"toy must be a Toy\(\.\.\.\)"):
        Factory(dataset_path, toy="records")


def test_a_registered_outputs_argument_is_refused_elsewhere(dataset_path: Path,
                                                            toy: None) -> None:
    with pytest.raises(fastloader.InvalidArgumentError, match=(
            r"toy=Toy\(offset=0\) is invalid: audio= and toy= choose two loaders\. Pass audio= "
            r"for a dataset of clips or toy= for one of records, not both\.")):
        Factory(dataset_path, audio=fastloader.Audio(), toy=Toy())
    with pytest.raises(fastloader.InvalidArgumentError, match=(
            r"toy=Toy\(offset=0\) is invalid: applies to the toy loader only, not to the "
            r"drop-in loader of a torch Dataset\. Apply transforms")):
        Factory(Numbers(), toy=Toy())
    with pytest.raises(fastloader.InvalidArgumentError, match=(
            r"transforms=.* applies to the packed loader, the DALI loader and the video loader "
            r"only, not to the toy loader of a packed dataset\. Drop it: the toy loader takes "
            r"toy= only\.")):
        Factory(dataset_path, toy=Toy(), transforms=CROP)
    with pytest.raises(fastloader.InvalidArgumentError,
                       match=r"sede=1 is invalid: is not an argument of FastLoader's toy loader "
                             r"of a packed dataset\. Did you mean seed=\?"):
        Factory(dataset_path, toy=Toy(), sede=1)
    # at FastLoader's default, another path's argument is taken and has no effect
    with Factory(dataset_path, 5, toy=Toy(), transforms=None, roi_decode=True) as loader:
        assert [b.tolist() for b in loader] == record_lengths(dataset_path, 5, 0)


def test_the_registry_is_left_as_it_was() -> None:
    """The toy lives for its tests only (the fixture's monkeypatch): FastLoader's paths and
    signature are the library's own."""
    assert "toy loader" not in PATHS and "toy loader" not in FastLoader._paths
    assert "toy" not in inspect.signature(fastloader.FastLoader).parameters


def test_audio_and_video_together_are_refused(dataset_path: Path) -> None:
    with pytest.raises(fastloader.InvalidArgumentError, match=(
            r"video=Video\(.*\) is invalid: audio= and video= choose two loaders\. Pass audio= "
            r"for a dataset of clips or video= for one of videos, not both\.")):
        Factory(dataset_path, audio=fastloader.Audio(), video=fastloader.Video())
