"""Exits and Ctrl-C in real processes (issue 28 items 4 and 5), against whichever fastloader
this interpreter imports: the editable install in `make test`, the installed wheel in `make
wheel`'s check (tools/wheel.sh runs the tests marked `installed`, the soaks included), where
module teardown differs from an editable install's.

- A script that leaves a started iterator, a batch on a pooled buffer and a second loader
  alive at exit prints nothing on stderr and exits 0.
- A SIGINT at a random moment mid-epoch always reaches the training loop as
  KeyboardInterrupt (never "Exception ignored in ...", the loop never runs on), and the
  process exits non-zero. The soak runs enough times to see a 1% failure (300 runs: a 1% loss
  shows up with 95% probability).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fastloader
from imagegen import make_tree

pytestmark = [pytest.mark.installed, pytest.mark.heavy]

LOADERS = """
import sys
import fastloader
path = sys.argv[1]
kw = dict(batch_size=4, device="cpu", num_threads=2,
          transforms=[fastloader.RandomResizedCrop(16), fastloader.RandomHorizontalFlip()])
"""

EXIT_SCRIPT = LOADERS + """
first = fastloader.FastLoader(path, normalize=((0.5,) * 3, (0.25,) * 3), **kw)
started = iter(first)
batch = next(started)  # float32 on a pooled buffer, alive at exit
second = fastloader.FastLoader(path, **kw)
other = iter(second)
pixels = next(other)
print(fastloader.__file__, flush=True)
"""

INTERRUPT_SCRIPT = LOADERS + """
import time
loader = fastloader.FastLoader(path, normalize=((0.5,) * 3, (0.25,) * 3), **kw)
ready = False
deadline = time.monotonic() + 20
try:
    while time.monotonic() < deadline:
        for images, labels in loader:  # each batch dies as the next arrives
            if not ready:
                print("ready", fastloader.__file__, flush=True)
                ready = True
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
print("finished", flush=True)  # the loop ran on: the Ctrl-C was lost
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exits")
    make_tree(root / "tree", classes=2, per_class=24, size=(40, 48))
    fastloader.pack(root / "tree", root / "d.lmdb", workers=1)
    return root / "d.lmdb"


def _child(script: str, dataset: Path) -> subprocess.Popen[str]:
    # cwd: a folder without the checkout, so the child imports what this interpreter has
    # installed (the wheel under test, or the editable install)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(dataset)],
                            cwd=dataset.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _exit_run(dataset: Path) -> tuple[int, str, str]:
    child = _child(EXIT_SCRIPT, dataset)
    out, err = child.communicate(timeout=120)
    return child.returncode, out, err


def _check_exits(dataset: Path, runs: int) -> None:
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: _exit_run(dataset), range(runs)))
    for code, out, err in results:
        assert (code, err) == (0, ""), f"exit code {code}, stderr:\n{err}"
        assert out.strip() == fastloader.__file__  # the package this test imports


def _interrupt_run(dataset: Path, seed: int) -> tuple[int | None, str, str]:
    child = _child(INTERRUPT_SCRIPT, dataset)
    assert child.stdout is not None
    line = child.stdout.readline()  # after the first batch: mid-epoch from here on
    if line.startswith("ready"):
        time.sleep(random.Random(seed).uniform(0.0, 0.4))
        child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
    return child.returncode, line + out, err


def _check_interrupts(dataset: Path, runs: int, parallel: int) -> None:
    with ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(lambda seed: _interrupt_run(dataset, seed), range(runs)))
    lost = [(code, out, err) for code, out, err in results
            if code == 0 or "interrupted" not in out or "finished" in out
            or "Exception ignored" in err]
    assert not lost, (f"{len(lost)} of {runs} runs lost the Ctrl-C; the first: exit code "
                      f"{lost[0][0]}, stdout {lost[0][1]!r}, stderr:\n{lost[0][2]}")
    assert all(f"ready {fastloader.__file__}" in out for _, out, _ in results)


def test_exit_with_live_iterators_is_silent(dataset: Path) -> None:
    _check_exits(dataset, 2)


def test_ctrl_c_mid_epoch_reaches_the_loop(dataset: Path) -> None:
    _check_interrupts(dataset, 6, 2)


@pytest.mark.slow
def test_exit_soak(dataset: Path) -> None:
    """The issue's count: 5 runs of 5 (it saw the noise 5 times a run, every run)."""
    _check_exits(dataset, 25)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # 300 processes that each import torch: ~12 min on 2 busy cores
def test_ctrl_c_soak(dataset: Path) -> None:
    started = time.perf_counter()
    _check_interrupts(dataset, 300, max(2, min(4, len(os.sched_getaffinity(0)))))
    print(f"300 interrupted runs, none lost, in {time.perf_counter() - started:.0f} s")
