"""loader/remote/schedule.py: which batch a remote worker gets next (far enough ahead of the
producer to be back in time, never before a batch a worker holds), and when the producer takes a
worker's batch back instead of waiting for it. Pure arithmetic: no Ray here."""

from __future__ import annotations

import pytest

from fastloader.loader.remote.schedule import (
    Costs,
    Holding,
    next_for_worker,
    next_in_order,
    seconds_to_finish,
    smoothed,
    take_back,
)

MEASURED = Costs(local_s=0.080, absorb_s=0.002)


def test_smoothed_starts_at_the_first_sample_then_leans_to_the_newest() -> None:
    assert smoothed(None, 0.5) == 0.5
    assert smoothed(1.0, 0.0) == pytest.approx(0.7)


def test_seconds_to_finish_counts_the_rest_of_the_running_batch_and_the_queue() -> None:
    idle = Holding((), None, 0.080)
    assert seconds_to_finish(idle, now=5.0, guess_s=None) == pytest.approx(0.080)
    busy = Holding((7, 9), running_since=5.0, batch_s=0.080)
    # 30 ms into batch 7: its 50 ms left, batch 9, then the new one
    assert seconds_to_finish(busy, now=5.030, guess_s=None) == pytest.approx(0.050 + 0.160)
    overdue = Holding((7,), running_since=5.0, batch_s=0.080)
    assert seconds_to_finish(overdue, now=6.0, guess_s=None) == pytest.approx(0.080)
    unmeasured = Holding((), None, None)
    assert seconds_to_finish(unmeasured, now=0.0, guess_s=0.1) == pytest.approx(0.1)
    assert seconds_to_finish(unmeasured, now=0.0, guess_s=None) is None


def test_a_worker_gets_the_first_batch_the_producer_reaches_after_it_is_done() -> None:
    # the producer decodes 10 (claimed), then 11, 12, ... at 80 ms each: it reaches 12 after
    # 160 ms and 13 after 240 ms; a worker done in 200 ms gets 13, the ones before stay local
    assert next_for_worker(10, 10, 48, set(), MEASURED, eta_s=0.200) == 13
    assert next_for_worker(10, 10, 48, set(), MEASURED, eta_s=0.240) == 13
    assert next_for_worker(10, 10, 48, set(), MEASURED, eta_s=0.241) == 14
    assert next_for_worker(10, 10, 48, set(), MEASURED, eta_s=0.0) == 11


def test_batches_a_worker_holds_cost_the_producer_only_their_absorb() -> None:
    # 11 and 12 are on workers: the producer is at 13 after 80 + 2 + 2 ms, at 14 after 164
    assert next_for_worker(10, 10, 48, {11, 12}, MEASURED, eta_s=0.100) == 14
    assert next_for_worker(10, 10, 48, {11, 12}, MEASURED, eta_s=0.080) == 13


def test_a_worker_never_gets_a_batch_before_one_a_worker_holds() -> None:
    # giving 11 would make the producer reach 20 sooner than 20's worker was told: it goes
    # past the last held batch, whatever the estimate
    assert next_for_worker(10, 10, 48, {20}, MEASURED, eta_s=0.0) == 21
    # and never to one of the trainer's own (prepared ahead, up to claimed)
    assert next_for_worker(10, 12, 48, set(), MEASURED, eta_s=0.0) == 13


def test_unmeasured_gives_the_nearest_free_batch() -> None:
    assert next_for_worker(0, 0, 12, set(), Costs(None, None), eta_s=None) == 1
    assert next_for_worker(0, 0, 12, {1, 2}, Costs(0.08, None), eta_s=None) == 3


def test_at_the_pass_end_the_last_batch_only_when_waiting_beats_decoding_it() -> None:
    # producer at 44 (claimed), end 48: it reaches 47 after 3 x 80 = 240 ms
    assert next_for_worker(44, 44, 48, set(), MEASURED, eta_s=0.250) == 47  # a 10 ms wait
    assert next_for_worker(44, 44, 48, set(), MEASURED, eta_s=0.400) is None  # 160 ms: no
    assert next_for_worker(44, 47, 48, set(), MEASURED, eta_s=0.0) is None  # all claimed
    assert next_for_worker(44, 44, 48, {47}, MEASURED, eta_s=0.0) is None  # all given out


def test_remote_only_gives_batches_in_order() -> None:
    assert next_in_order(4, 12, {4, 5, 7}) == 6
    assert next_in_order(10, 12, {10, 11}) is None


def test_a_queued_batch_is_taken_back_a_running_one_only_when_waiting_is_longer() -> None:
    holding = Holding((5, 6, 7), running_since=1.0, batch_s=0.090)
    assert take_back(holding, 6, now=1.0, local_s=0.080)  # queued behind 5: cancelled there
    assert take_back(holding, 7, now=1.0, local_s=0.080)
    assert not take_back(holding, 5, now=1.050, local_s=0.080)  # 40 ms left: wait
    assert take_back(holding, 5, now=1.050, local_s=0.080, waited=0.081)  # waited past a decode
    assert take_back(holding, 5, now=1.0, local_s=0.080)  # 90 ms left > an 80 ms decode
    assert take_back(holding, 5, now=1.0, local_s=0.005)  # a fast trainer takes it back
    unmeasured = Holding((5,), running_since=1.0, batch_s=None)
    assert not take_back(unmeasured, 5, now=1.0, local_s=0.080)
    assert not take_back(holding, 5, now=1.0, local_s=None)
