"""A process using FastLoader exits cleanly however the loader is left, and survives fork()."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop
from fastloader.errors import FastloaderError
from fastloader.loader.loader import FastLoader
from fastloader.pack.pipeline.tree import pack
from helpers import run_in_fork
from imagegen import make_tree

TRAIN = [RandomResizedCrop(48), RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exit")
    make_tree(root / "tree", classes=3, per_class=10, size=(80, 96))
    return {fmt: pack(root / "tree", root / f"data.{fmt}", workers=1, quiet=True) and
            root / f"data.{fmt}" for fmt in ("lmdb", "h5")}


# Each mode leaves a pass running when the interpreter exits; prefetch 4 with 2 decode threads
# keeps the producer inside native decode (GIL released) most of the time, the case that
# aborted: finalization killed the daemon producer while it took the GIL back.
SCRIPT = textwrap.dedent("""
    import sys
    from fastloader.decode.augment import RandomResizedCrop
    from fastloader.loader.loader import FastLoader

    def main(path, mode):
        loader = FastLoader(path, batch_size=4, transforms=[RandomResizedCrop(48)],
                            num_threads=2, prefetch=4, device="cpu")
        global it
        it = iter(loader)
        next(it)
        if mode == "sys.exit":
            sys.exit(0)
        if mode == "raise":
            raise SystemExit(0)  # unwinds through the frames that hold the iterator
        if mode == "error":  # an uncaught exception, as when a training run fails
            raise RuntimeError("loss is NaN")
        if mode == "local":
            local = iter(loader)  # a second pass, still referenced by a frame at exit
            next(local)
            sys.exit(0)

    main(sys.argv[1], sys.argv[2])
""")


@pytest.mark.heavy
def test_exit_with_a_live_iterator_is_clean_20_times(packed: dict[str, Path],
                                                     tmp_path: Path) -> None:
    script = tmp_path / "exit_live.py"
    script.write_text(SCRIPT)
    modes = ["return", "sys.exit", "raise", "local", "error"]
    failures = []
    for run in range(20):
        path = packed["lmdb" if run % 2 == 0 else "h5"]
        mode = modes[run % len(modes)]
        done = subprocess.run([sys.executable, str(script), str(path), mode],
                              capture_output=True, text=True, timeout=120)
        expected = 1 if mode == "error" else 0  # Python's own code for an uncaught error
        if done.returncode != expected or "terminate" in done.stderr:
            failures.append((run, path.suffix, mode, done.returncode, done.stderr[-300:]))
    assert failures == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: the case tested
def test_a_forked_child_gets_a_working_loader(packed: dict[str, Path]) -> None:
    with FastLoader(packed["lmdb"], batch_size=4, shuffle=True, transforms=TRAIN,
                    num_threads=3, prefetch=2, device="cpu") as loader:
        expected = [labels.tolist() for _, labels in loader]  # epoch 0, whole
        loader.set_epoch(0)
        it = iter(loader)
        next(it)  # a pass in flight, pool threads busy, at fork time
        def child() -> int:
            try:
                next(it)  # the parent's pass: its producer thread is not in this process
                raise AssertionError("an inherited pass went on in the child")
            except FastloaderError as exc:
                assert "forked" in str(exc)
            loader.set_epoch(0)
            labels = [lab.tolist() for _, lab in loader]  # a new pass in the child
            return 0 if labels == expected else 2

        status, message = run_in_fork(child, 60)
        assert status == 0, f"child exit {status} (None: hung): {message}"
        assert sum(1 for _ in it) == len(loader) - 1  # the parent's pass goes on

