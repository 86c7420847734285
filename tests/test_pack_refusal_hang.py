"""A pack refused on a bad file ends by itself, whatever its process pool's workers left
behind: a result-queue or task-queue lock held by a dead process used to hang
Pool.terminate() for good (issue 38: 26 minutes in SimpleQueue.put). And a pool worker stopped
while it holds a queue's lock ends only once it released it, its message whole."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fastloader.pack.engines import pool as engine_pool
from faults import packdata_command
from imagegen import make_tree

BOUND_S = 60  # a hang guard, not a timing: the stop is bounded by seconds


pytestmark = [pytest.mark.heavy, pytest.mark.native_neutral]


@pytest.fixture
def bad_tree(tmp_path: Path) -> Path:
    src = make_tree(tmp_path / "src", classes=2, per_class=20, size=(24, 32))
    (src / "class_1" / "zz_bad.jpg").write_bytes(b"not a jpeg")
    return src


def run_bounded(command: list[str]) -> tuple[int, str]:
    """Run command (its own process group); its exit code and stderr, or fail if it is still
    running after BOUND_S (its whole group killed)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"packdata did not end within {BOUND_S} s: it hung")
    return proc.returncode, err


@pytest.mark.parametrize("lock", ["result", "task"])
def test_a_refusal_ends_though_a_dead_worker_holds_a_queue_lock(
        bad_tree: Path, tmp_path: Path, lock: str) -> None:
    dst = tmp_path / "out.h5"
    code, err = run_bounded(packdata_command([str(bad_tree), str(dst), "--workers", "2"],
                                             dead_lock=lock))
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"packdata: error: {bad_tree / 'class_1' / 'zz_bad.jpg'}: not an image"), err
    assert not dst.exists()
    assert not (tmp_path / ".out.h5.partial").exists()


def _send_then_wait(queue: engine_pool.GuardedQueue, stopping: object, payload: bytes) -> None:
    """A pool worker's side: stopped (its pool's flag set), it sends a result larger than the
    pipe holds, so it is inside the queue's write lock until the reader takes it all."""
    engine_pool.worker_signals(stopping)
    queue.put(payload)
    time.sleep(BOUND_S)  # stopped after its put: it must not get here


def test_a_worker_stopped_while_sending_ends_after_the_send_with_the_lock_free() -> None:
    context = multiprocessing.get_context("fork")
    queue = engine_pool.GuardedQueue(ctx=context)
    stopping = context.RawValue("b", 1)
    payload = os.urandom(4 << 20)  # far more than a pipe's buffer
    worker = context.Process(target=_send_then_wait, args=(queue, stopping, payload))
    worker.start()
    try:
        deadline = time.monotonic() + BOUND_S
        while not queue._reader.poll(0.05):  # the worker is sending now
            assert time.monotonic() < deadline and worker.is_alive()
        os.kill(worker.pid, signal.SIGTERM)  # the pool's stop, landing mid-send
        worker.join(1.0)  # a worker that acts on it there dies now, the lock held
        assert worker.is_alive(), "the worker died while it held the queue's write lock"
        assert queue.get() == payload  # the whole message
        worker.join(BOUND_S)
        assert worker.exitcode == 128 + signal.SIGTERM
        assert queue._wlock.acquire(block=False)
    finally:
        if worker.is_alive():
            worker.kill()
