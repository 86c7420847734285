"""The one producer (loader/pipeline/producer.py) with a filler of its own: what any kind's batches
get from it (order, read-ahead, the ring or the queue holding it back, a prompt stop, errors named
by stage and batch, slots given back on a failure), and that the clip loaders run on it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import fastloader
from audiogen import clip
from fastloader import Audio, FastLoader
from fastloader.errors import DecodeError, FastloaderError, ProducerError
from fastloader.loader.pipeline.autotune import Setting
from fastloader.loader.pipeline.memory import BatchRing
from fastloader.loader.pipeline.producer import Producer, StageError
from fastloader.loader.pipeline.stats import Counters


@dataclass(frozen=True)
class Toy:
    number: int
    slot: int | None
    prepared_on: str

    @property
    def count(self) -> int:
        return 1


class ToyBatches:
    """Batch b is the number b, written into its slot's first byte."""

    def __init__(self, ring: BatchRing | None, fail: dict[int, str] | None = None,
                 read_ahead: bool = True) -> None:
        self.ring, self.fail, self.read_ahead = ring, fail or {}, read_ahead
        self.filled: list[int] = []

    def prepare(self, b: int) -> str:
        if self.fail.get(b) == "plan":
            try:
                raise ValueError(f"no plan for batch {b}")
            except ValueError as exc:
                raise StageError("plan", b) from exc
        return threading.current_thread().name

    def fill(self, b: int, slot: int | None, prepared: str) -> Toy:
        if self.fail.get(b) == "decode":
            raise DecodeError(f"batch {b} does not decode")
        if slot is not None and self.ring is not None:
            self.ring.arrays[slot].reshape(-1)[0] = b
        self.filled.append(b)
        return Toy(b, slot, prepared)

    def apply(self, setting: Setting, slots: int) -> None:
        raise AssertionError("no tuner was given")


def _wait_until(condition: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


@pytest.mark.parametrize("read_ahead", [True, False])
def test_a_fillers_batches_come_in_order_each_prepared_where_it_asks(read_ahead: bool) -> None:
    ring = BatchRing(3, 1, 1, 1, pin=False)
    filler = ToyBatches(ring, read_ahead=read_ahead)
    producer = Producer(filler, ring, Counters(), range(2, 7)).start()
    got = []
    while (batch := producer.get(Counters())) is not None:
        assert ring.arrays[batch.slot].reshape(-1)[0] == batch.number  # type: ignore[index]
        # on the helper thread, one batch ahead; or on the producer's own
        assert batch.prepared_on.startswith(
            "fastloader-prepare-" if read_ahead else "fastloader-producer-")
        got.append(batch.number)
        ring.release(batch.slot)  # type: ignore[arg-type]
    assert got == [2, 3, 4, 5, 6]
    producer.shutdown()
    assert producer.thread is not None and not producer.thread.is_alive()


@pytest.mark.parametrize("with_ring", [True, False])
def test_the_ring_or_else_the_queue_holds_it_back_and_a_stop_is_prompt(
        with_ring: bool) -> None:
    ring = BatchRing(2, 1, 1, 1, pin=False) if with_ring else None
    filler = ToyBatches(ring)
    producer = Producer(filler, ring, Counters(), range(100), depth=3).start()
    _wait_until(lambda: len(filler.filled) >= (2 if with_ring else 4))
    time.sleep(0.3)  # nobody takes a batch: it must not run further ahead
    # 2 ring slots; or 3 queued and the fourth in hand, waiting for room
    assert len(filler.filled) == (2 if with_ring else 4)
    started = time.monotonic()
    producer.shutdown()
    assert time.monotonic() - started < 2.0
    assert producer.thread is not None and not producer.thread.is_alive()
    assert producer.queue_depth() == 0


@pytest.mark.parametrize("read_ahead", [True, False])
@pytest.mark.parametrize(("stage", "error"), [("plan", ProducerError), ("decode", DecodeError)])
def test_a_failure_names_its_stage_and_batch_and_gives_the_slot_back(
        stage: str, error: type[Exception], read_ahead: bool) -> None:
    ring = BatchRing(2, 1, 1, 1, pin=False)
    producer = Producer(ToyBatches(ring, {1: stage}, read_ahead), ring, Counters(),
                        range(4)).start()
    first = producer.get(Counters())
    assert first is not None and first.number == 0
    ring.release(first.slot)  # type: ignore[arg-type]
    with pytest.raises(error, match=rf"stage '{stage}', batch 1") as caught:
        producer.get(Counters())
    assert isinstance(caught.value.__cause__, ValueError if stage == "plan" else DecodeError)
    producer.shutdown()
    gave_up = threading.Event()  # a slot never given back: acquire stops waiting at 2 s
    timer = threading.Timer(2.0, gave_up.set)
    timer.start()
    held = [ring.acquire(gave_up, poll_s=0.01) for _ in range(2)]
    timer.cancel()
    assert None not in held
    # both slots free: the failed batch's was given back
    assert sorted(h for h in held if h is not None) == [0, 1]


def test_a_ring_slot_is_seen_in_any_shape_and_dtype_and_refuses_what_does_not_fit() -> None:
    ring = BatchRing.of_bytes(2, 100, pin=False)  # a clip kind's: batches of varying shape
    ring.arrays[0][:] = 0  # the slots are not cleared when allocated
    batch = ring.shaped(1, (5, 5), np.dtype(np.float32))
    batch[:] = 1.5
    assert ring.arrays[1].reshape(-1)[:100].view(np.float32).sum() == 37.5  # in the slot
    assert not ring.arrays[0].any()
    with pytest.raises(FastloaderError, match="does not fit a ring slot"):
        ring.shaped(0, (26,), np.dtype(np.float32))


def _producer_threads() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("fastloader-producer", "fastloader-prepare")) and t.is_alive()]


def test_the_clip_loaders_run_on_the_one_producer(tmp_path: Path) -> None:
    root = tmp_path / "a.lmdb"
    fastloader.pack([{"audio": clip(16000, 0.3, 1, "flac", seed=i), "label": i % 2}
                     for i in range(8)], root, fields={"audio": "audio", "label": "int"})
    with FastLoader(root, device="cpu", batch_size=2, audio=Audio(sample_rate=16000),
                    prefetch=1) as loader:
        for step, _ in enumerate(loader):
            if step == 1:
                assert any(n.startswith("fastloader-producer-") for n in _producer_threads())
                break
        _wait_until(lambda: not _producer_threads())
        assert _producer_threads() == []
        assert len(list(loader)) == 4  # a whole pass after the broken one
        assert loader.stats().producer_s > 0
