"""The CUDA copy's three guards, each shown necessary: the race test and its negative controls.

DeviceStep copies a pinned ring slot on a side stream. Three guards keep that safe:
- the event: the producer reuses a slot only after its copy finished;
- wait_stream: the consumer's stream converts the batch only after the copy landed;
- record_stream: the staged device block is not reused by the side stream's next copy while
  the consumer's stream may still read it.
The test widens each window (a sleep on the side stream before the copy, or on the consumer's
stream before next(); prefetch=1 and large slots) and compares every batch with the CPU
loader's. With all guards it must match; with any one guard switched off (a test-only switch,
fastloader.gpu.device.RACE_SWITCHES) it must not, which proves the test can see that race.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader.decode.augment import CenterCrop
from fastloader.gpu.device import RACE_SWITCHES
from fastloader.pack.pipeline.tree import pack
from imagegen import make_tree

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA device: the race is between CUDA streams"),
]
SIDE_SLEEP = 200_000_000  # GPU cycles (~0.1 s at 2 GHz): longer than decoding a batch
CONSUMER_SLEEP = 600_000_000  # longer than producing the next batch and copying it
BATCH = 32


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("race")
    make_tree(root / "tree", classes=2, per_class=3 * BATCH, size=(240, 320))
    pack(root / "tree", root / "data.lmdb", workers=2)
    return root / "data.lmdb"


def make_loader(path: Path, device: str) -> Any:
    from fastloader.loader.loader import FastLoader

    # uint8 output: on CUDA a plain copy of the staged batch, so any corruption is exact.
    return FastLoader(str(path), batch_size=BATCH, shuffle=True, seed=11,
                      transforms=[CenterCrop(224)], device=device, num_threads=2, prefetch=1)


@pytest.fixture(scope="module")
def expected(packed: Path) -> list[torch.Tensor]:
    with make_loader(packed, "cpu") as loader:
        return [images.clone() for images, _ in loader]


@pytest.fixture
def switches() -> Iterator[None]:
    yield
    RACE_SWITCHES.skip = set()
    RACE_SWITCHES.side_sleep_cycles = 0


def corrupted_batches(path: Path, expected: list[torch.Tensor], skip: set[str],
                      side_sleep: int, consumer_sleep: int) -> int:
    """Run a CUDA pass with the given guards off and sleeps; count batches that differ."""
    RACE_SWITCHES.skip = set(skip)
    RACE_SWITCHES.side_sleep_cycles = side_sleep
    kept = []
    with make_loader(path, "cuda") as loader:
        iterator = iter(loader)
        while True:
            if consumer_sleep:
                torch.cuda._sleep(consumer_sleep)  # the training step, still running
            batch = next(iterator, None)
            if batch is None:
                break
            kept.append(batch[0])
    torch.cuda.synchronize()
    assert len(kept) == len(expected)
    return sum(not torch.equal(got.cpu(), want) for got, want in zip(kept, expected, strict=True))


@pytest.mark.parametrize(("side", "consumer"), [(SIDE_SLEEP, 0), (0, CONSUMER_SLEEP)],
                         ids=["slow-side-stream", "slow-consumer"])
def test_guarded_copies_never_race(packed: Path, expected: list[torch.Tensor], switches: None,
                                   side: int, consumer: int) -> None:
    copy = shutil.copytree(packed, packed.parent / f"guarded-{side}-{consumer}.lmdb")
    assert corrupted_batches(copy, expected, set(), side, consumer) == 0


@pytest.mark.parametrize(("guard", "side", "consumer"), [
    ("event", SIDE_SLEEP, 0),  # the producer overwrites a slot whose copy has not run
    ("wait_stream", SIDE_SLEEP, 0),  # the conversion reads before the copy landed
    ("record_stream", 0, CONSUMER_SLEEP),  # the next copy reuses the block being read
])
def test_each_guard_removed_shows_the_race(packed: Path, expected: list[torch.Tensor],
                                           switches: None, guard: str, side: int,
                                           consumer: int) -> None:
    copy = shutil.copytree(packed, packed.parent / f"unguarded-{guard}.lmdb")
    assert corrupted_batches(copy, expected, {guard}, side, consumer) > 0, (
        f"with {guard} removed every batch still matched: this test cannot see that race")
