"""fastloader.Remote's arguments checked before anything starts: each bad value refused naming
the argument, the value, the rule and the fix; remote= refused where a loader cannot honour it
(the DALI backend, the drop-in loader) and when it is not a Remote. No Ray is started here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import fastloader
from fastloader import FastLoader, Remote
from fastloader.errors import InvalidArgumentError, InvalidTypeError

pytestmark = pytest.mark.native_neutral

CROP = [fastloader.CenterCrop(16)]


@pytest.mark.parametrize(("arguments", "error", "words"), [
    ({"workers": 0}, InvalidArgumentError, r"workers=0 is invalid"),
    ({"workers": "2"}, InvalidTypeError, r"workers"),
    ({"address": "nowhere"}, InvalidArgumentError, r"address='nowhere'.*ray://"),
    ({"address": 6379}, InvalidTypeError, r"address"),
    ({"num_cpus": 0}, InvalidArgumentError, r"num_cpus=0 .*\(0, 1024\]"),
    ({"num_cpus": True}, InvalidTypeError, r"num_cpus"),
    ({"resources": {"CPU": 1}}, InvalidArgumentError, r"resources\['CPU'\].*num_cpus="),
    ({"resources": {"cpu_node": -1}}, InvalidArgumentError, r"resources\['cpu_node'\]=-1"),
    ({"resources": [("cpu_node", 1)]}, InvalidTypeError, r"resources"),
    ({"window": 0}, InvalidArgumentError, r"window=0"),
    ({"local": "yes"}, InvalidTypeError, r"local"),
    ({"on_lost": "retry"}, InvalidArgumentError, r"on_lost='retry'.*'local' or 'raise'"),
    ({"lost_timeout": 0}, InvalidArgumentError, r"lost_timeout=0.*seconds > 0"),
    ({"startup_timeout": float("inf")}, InvalidArgumentError, r"startup_timeout=inf"),
])
def test_bad_remote_arguments_are_refused(arguments: dict[str, Any], error: type,
                                          words: str) -> None:
    with pytest.raises(error, match=words):
        Remote(**arguments)


def test_good_arguments_are_kept_and_defaults_derived() -> None:
    remote = Remote(workers=3, address="ray://head:10001", num_cpus=2.5,
                    resources={"cpu_node": 1}, local=False, on_lost="raise")
    assert (remote.workers, remote.threads, remote.in_flight) == (3, 3, 14)
    assert remote.resources == {"cpu_node": 1.0}
    assert Remote(address="head:6379", window=5).in_flight == 5


def test_remote_must_be_a_remote(dataset_path: Path) -> None:
    with pytest.raises(InvalidTypeError, match=r"remote.*fastloader.Remote"):
        FastLoader(dataset_path, device="cpu", transforms=CROP, remote={"workers": 2})
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


class _Numbers(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(i)


def test_loaders_that_cannot_use_workers_refuse_remote(dataset_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"remote=.*not to the DALI loader"):
        FastLoader(dataset_path, device="cpu", transforms=CROP, backend="dali",
                   remote=Remote())
    with pytest.raises(InvalidArgumentError, match=r"remote=.*not to the drop-in loader"):
        FastLoader(_Numbers(), batch_size=2, remote=Remote())
