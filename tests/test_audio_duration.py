"""Duration-bucketed batches: within max_batch_seconds (padded seconds), deterministic for a
seed, equal step counts on every rank, resumed exactly (and on another world size, after
the global batches already taken)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from audiogen import clip
from fastloader import Audio, FastLoader
from fastloader.errors import InvalidArgumentError
from fastloader.loader.order.duration_batches import BatchPlan, deal
from fastloader.loader.pipeline.memory import BatchRing
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package


def _durations(n: int = 500, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.1, 20.0, n)


def _plan(durations: np.ndarray, **kwargs: Any) -> BatchPlan:
    settings = {"seed": 7, "shuffle": True, "batch_size": 1, "max_seconds": 60.0,
                "buckets": 6, "drop_last": False} | kwargs
    return BatchPlan(durations, **settings)


def test_batches_stay_within_the_limit_and_cover_the_epoch() -> None:
    durations = _durations()
    plan = _plan(durations)
    batches = plan.batches(0)
    for batch in batches:
        padded = len(batch) * durations[batch].max()
        assert padded <= 60.0 or len(batch) == 1
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(durations)))
    # bucketed: a batch's clips are alike (padding is a small part of the batch)
    waste = sum(len(b) * durations[b].max() - durations[b].sum() for b in batches)
    assert waste < 0.25 * durations.sum()


def test_a_clip_over_the_limit_is_a_batch_of_its_own() -> None:
    durations = np.array([1.0, 1.0, 90.0, 1.0])
    batches = _plan(durations, shuffle=False, buckets=1).batches(0)
    assert [b.tolist() for b in batches] == [[0, 1], [2], [3]]


def test_the_plan_is_a_function_of_seed_and_epoch() -> None:
    durations = _durations()
    one = [b.tolist() for b in _plan(durations).batches(3)]
    assert one == [b.tolist() for b in _plan(durations).batches(3)]
    assert one != [b.tolist() for b in _plan(durations).batches(4)]
    assert one != [b.tolist() for b in _plan(durations, seed=8).batches(3)]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_every_rank_gets_the_same_number_of_steps(world: int, drop_last: bool) -> None:
    plan = _plan(_durations(), drop_last=drop_last)
    dealt = [plan.rank_batches(0, rank, world) for rank in range(world)]
    assert len({len(d) for d in dealt}) == 1
    seen = {i for d in dealt for b in d for i in b.tolist()}
    if not drop_last:
        assert seen == set(range(500))
    total = len(plan.batches(0))
    assert len(dealt[0]) == (total // world if drop_last else -(-total // world))


def test_a_resume_on_the_same_world_continues_exactly() -> None:
    plan = _plan(_durations())
    for world in (1, 3):
        for rank in range(world):
            whole = plan.rank_batches(1, rank, world)
            for k in (0, 5, len(whole)):
                rest = plan.rank_batches(1, rank, world, start=k * world)
                assert [b.tolist() for b in rest] == [b.tolist() for b in whole[k:]]


def test_deal_wraps_to_the_first_batches() -> None:
    batches = [np.array([i]) for i in range(5)]
    assert [b.tolist() for b in deal(batches, 1, 3, 0, False)] == [[1], [4]]
    assert [b.tolist() for b in deal(batches, 2, 3, 0, False)] == [[2], [0]]
    assert deal(batches, 0, 3, 0, True)[-1].tolist() == [0]


# -- through the loader -------------------------------------------------------------------

@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dur") / "speech.lmdb"
    rng = np.random.default_rng(1)
    seconds = rng.uniform(0.1, 2.0, 40)
    pack([{"audio": clip(8000, float(s), 1, "wav", seed=i), "text": str(i)}
          for i, s in enumerate(seconds)], root, fields={"audio": "audio", "text": "text"})
    return root


def _loader(root: Path, **kwargs: Any) -> FastLoader:
    settings = {"device": "cpu", "fields": ["audio", "text"], "shuffle": True, "seed": 2,
                "audio": Audio(sample_rate=8000), "max_batch_seconds": 4.0,
                "duration_buckets": 4} | kwargs
    return FastLoader(root, **settings)


def _texts(batches: list[Any]) -> list[list[str]]:
    return [list(texts) for _, texts in batches]


def test_loader_batches_hold_at_most_the_padded_seconds(speech: Path) -> None:
    with _loader(speech) as loader:
        batches = list(loader)
    for (waves, lengths), _ in batches:
        assert waves.shape[0] * waves.shape[2] <= 4.0 * 8000 or waves.shape[0] == 1
        assert waves.shape[2] == int(lengths.max())
    assert sum(len(t) for t in _texts(batches)) == 40


def test_loader_ranks_take_equal_steps(speech: Path) -> None:
    counts = []
    seen: set[str] = set()
    for rank in range(3):
        with _loader(speech, rank=rank, world_size=3) as loader:
            texts = _texts(list(loader))
            assert len(texts) == len(loader)
            counts.append(len(texts))
            seen |= {t for batch in texts for t in batch}
    assert len(set(counts)) == 1 and len(seen) == 40


def test_loader_resumes_exactly_and_elastically(speech: Path) -> None:
    with _loader(speech) as loader:
        loader.set_epoch(2)
        whole = _texts(list(loader))
    with _loader(speech) as loader:
        loader.set_epoch(2)
        it = iter(loader)
        head = [list(next(it)[1]) for _ in range(3)]
        state = loader.state_dict()
    assert head == whole[:3]
    with _loader(speech) as resumed:
        resumed.load_state_dict(state)
        assert _texts(list(resumed)) == whole[3:]
    # two ranks stop after 2 steps each (4 global batches); one rank takes the rest
    states = []
    for rank in range(2):
        with _loader(speech, rank=rank, world_size=2) as loader:
            loader.set_epoch(2)
            it = iter(loader)
            next(it), next(it)
            states.append(loader.state_dict())
    assert states[0]["global_batches_done"] == 4
    with _loader(speech) as one:
        one.load_state_dict(states[0])
        assert _texts(list(one)) == whole[4:]


def test_a_state_of_other_settings_is_refused(speech: Path) -> None:
    with _loader(speech) as loader:
        state = loader.state_dict()
    with _loader(speech, max_batch_seconds=5.0) as other, pytest.raises(
            InvalidArgumentError, match="max_batch_seconds"):
        other.load_state_dict(state)


def test_batch_size_with_max_batch_seconds_is_refused(speech: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        _loader(speech, batch_size=4)


def test_a_duration_plan_resumes_on_more_ranks_sharing_the_batches_left(speech: Path) -> None:
    with _loader(speech) as loader:
        loader.set_epoch(1)
        whole = _texts(list(loader))
    states = []
    for rank in range(2):  # two ranks take 3 steps each: 6 global batches
        with _loader(speech, rank=rank, world_size=2) as loader:
            loader.set_epoch(1)
            it = iter(loader)
            for _ in range(3):
                next(it)
            states.append(loader.state_dict())
    assert states[0]["pass_start"] == states[1]["pass_start"] == 6
    assert states[0]["position"] == sum(len(b) for b in whole[:6])
    taken = []
    for rank in range(3):
        with _loader(speech, rank=rank, world_size=3) as loader:
            loader.load_state_dict(states[rank % 2])
            taken.append(_texts(list(loader)))
    assert len({len(t) for t in taken}) == 1  # DDP-equal steps
    rest = whole[6:]
    dealt = [rest[(j * 3 + r) % len(rest)] for j in range(len(taken[0])) for r in range(3)]
    assert [b for j in range(len(taken[0])) for t in taken for b in [t[j]]] == dealt


def test_fixed_counts_resume_on_another_batch_size_and_world(speech: Path) -> None:
    def fixed(**kwargs: Any) -> FastLoader:
        return _loader(speech, max_batch_seconds=None, **kwargs)

    with fixed(batch_size=5) as loader:
        order = [t for batch in _texts(list(loader)) for t in batch]
    with fixed(batch_size=5, rank=1, world_size=2) as loader:
        it = iter(loader)
        next(it), next(it)  # 2 steps x 2 ranks x 5 clips
        state = loader.state_dict()
    assert state["position"] == state["pass_start"] == 20
    parts = []
    for rank in range(3):
        with fixed(batch_size=3, rank=rank, world_size=3, drop_last=True) as loader:
            loader.load_state_dict(state)
            parts.append(_texts(list(loader)))
    steps = len(parts[0])
    assert all(len(p) == steps for p in parts) and steps == (40 - 20) // 3 // 3
    got = [t for j in range(steps) for p in parts for t in p[j]]
    assert got == order[20:20 + 9 * steps]  # the order's rest, strided over the new ranks


def test_a_state_of_another_dataset_or_an_old_version(speech: Path, tmp_path: Path) -> None:
    with _loader(speech) as loader:
        loader.set_epoch(1)
        whole = _texts(list(loader))
        loader.set_epoch(1)  # the full pass moved the loader on to epoch 2
        it = iter(loader)
        next(it), next(it)
        state = loader.state_dict()
    other = tmp_path / "other.lmdb"
    pack([{"audio": clip(8000, 0.5, 1, "wav", seed=i), "text": str(i)} for i in range(40)],
         other, fields={"audio": "audio", "text": "text"})
    with _loader(other) as loader, pytest.raises(InvalidArgumentError, match="dataset"):
        loader.load_state_dict(state)
    old = {k: state[k] for k in ("kind", "epoch", "batches_done", "seed", "num_samples",
                                 "batch_size", "max_batch_seconds", "buckets", "shuffle",
                                 "drop_last", "rank", "world_size")}
    with _loader(speech) as loader:  # version 1: the global batches taken
        loader.load_state_dict({**old, "version": 1, "global_batches_done": 2})
        assert _texts(list(loader)) == whole[2:]
    with _loader(speech, max_batch_seconds=None, batch_size=5) as loader:
        loader.set_epoch(1)
        fixed = _texts(list(loader))
    v1 = {**old, "version": 1, "global_batches_done": 2, "batch_size": 5,
          "max_batch_seconds": None, "epoch": 1}
    with _loader(speech, max_batch_seconds=None, batch_size=5) as loader:
        loader.load_state_dict(v1)  # 2 batches of 5 of the fixed-count plan
        assert _texts(list(loader)) == fixed[2:]


def test_a_stopped_pass_frees_the_slots_its_queued_batches_held(speech: Path) -> None:
    # the ring is CUDA's (page-locked); here one unpinned in its place, on the CPU path
    with _loader(speech, prefetch=2) as loader:
        ring = loader._ring = BatchRing(3, 1, 1, 200_000, pin=False)
        iter(loader)
        deadline = time.monotonic() + 30
        while ring._free.qsize() and time.monotonic() < deadline:  # queued ones hold slots
            time.sleep(0.01)
        assert ring._free.qsize() == 0
        loader._stop_pass()  # what a break and the next iter() do
        assert ring._free.qsize() == ring.slots


def test_each_pass_reads_the_next_epoch_and_a_probe_keeps_the_resume(speech: Path) -> None:
    with _loader(speech, max_batch_seconds=None, batch_size=5) as loader:
        first = _texts(list(loader))
        assert loader.state_dict()["epoch"] == 1  # the full pass points at the next epoch
        second = _texts(list(loader))
        assert sorted(t for b in first for t in b) == sorted(t for b in second for t in b)
        assert first != second
        it = iter(loader)
        next(it)
        loader.load_state_dict({**loader.state_dict(), "epoch": 0, "pass_start": 10,
                                "position": 10})
        iter(loader)  # a probe (Lightning's): no batch out, the resume is not spent
        assert _texts(list(loader)) == first[2:]
