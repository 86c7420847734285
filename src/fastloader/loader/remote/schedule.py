"""How one pass's batches are shared between the trainer's own decode and its remote workers
(loader/remote/dispatch.py drives it): which batch a worker gets next, and whether the producer,
at a batch a worker holds, waits for it or takes it back and decodes it itself.

The producer hands batches out in plan order and decodes every batch no worker holds. A worker
is therefore given a batch far enough ahead of the producer that it is back when the producer
gets there: the producer's way to it costs a local decode a batch, or the taking in of a batch
a worker holds, and the worker needs the rest of what it holds and then this batch. The batches
in between stay local. Late binding mends what the estimates get wrong: a batch still queued
behind another on its worker is taken back (cancelled there) when the producer reaches it, and
one the worker is running is waited for only while that is shorter than decoding it here.
Pure arithmetic on measured seconds, without Ray, so the tests can drive it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Container, Sequence
from dataclasses import dataclass

_EMA = 0.3  # weight of the newest batch in a seconds-a-batch estimate


def smoothed(old: float | None, new: float) -> float:
    """An exponential moving average's next value (the first sample taken as it is)."""
    return new if old is None else (1.0 - _EMA) * old + _EMA * new


@dataclass(frozen=True)
class Holding:
    """What one live worker holds as the trainer sees it: its batches not yet back, in the
    order it runs them, when it (probably) began the first, and its seconds a batch."""

    pending: Sequence[int]
    running_since: float | None  # the first pending batch's start, as near as is known
    batch_s: float | None  # None until it delivered a batch


def seconds_to_finish(holding: Holding, now: float, guess_s: float | None) -> float | None:
    """When a batch given to the worker now would be back: the rest of its running batch,
    then each queued one, then this one (None while nothing is measured)."""
    batch_s = holding.batch_s if holding.batch_s is not None else guess_s
    if batch_s is None:
        return None
    if not holding.pending:
        return batch_s
    ran = 0.0 if holding.running_since is None else max(0.0, now - holding.running_since)
    return max(0.0, batch_s - ran) + batch_s * len(holding.pending)


@dataclass(frozen=True)
class Costs:
    """The producer's seconds a batch: decoding one itself, and taking in a worker's."""

    local_s: float | None
    absorb_s: float | None


def next_for_worker(position: int, claimed: int, end: int, held: Collection[int], costs: Costs,
                    eta_s: float | None) -> int | None:
    """The batch a worker gets: the first free one (past the trainer's own, numbered up to
    `claimed`, and past every batch a worker holds, whose turns it would otherwise move up)
    that the producer, starting at `position`, reaches no sooner than `eta_s` from now, each
    batch on the way costing it a local decode or, when a worker holds it, an absorb. Near the
    pass's end, where none is that far, the last one when the producer's wait for it would be
    shorter than decoding it; else None (every batch given out, or none worth giving)."""
    first = max(claimed + 1, max(held, default=-1) + 1, position)
    if first >= end:
        return None
    local_s, absorb_s = costs.local_s, costs.absorb_s
    if local_s is None or eta_s is None:
        return first  # nothing measured yet: the nearest, taken back if it is late
    absorb = absorb_s if absorb_s is not None else 0.0
    arrive = sum(absorb if m in held else local_s for m in range(position, first))
    last = arrive + local_s * (end - 1 - first)  # the producer at the last batch, all local
    if last < eta_s:
        return end - 1 if eta_s - last < local_s else None
    return first + max(0, math.ceil((eta_s - arrive) / local_s))


def next_in_order(position: int, end: int, held: Container[int]) -> int | None:
    """local=False: the workers make every batch, so the first one not yet given out."""
    return next((n for n in range(position, end) if n not in held), None)


def take_back(holding: Holding, batch: int, now: float, local_s: float | None,
              waited: float = 0.0) -> bool:
    """Whether the producer, at `batch` which the worker holds and has not delivered,
    decodes it itself: yes when it is queued behind another batch there (cancelled, it costs
    the worker nothing), or when the rest of the running batch, estimated or already waited
    for (`waited` seconds), is longer than a local decode (the worker's effort is then lost,
    but the trainer would wait longer)."""
    if not holding.pending or holding.pending[0] != batch:
        return True
    if local_s is None:
        return False
    if waited > local_s:
        return True
    if holding.batch_s is None or holding.running_since is None:
        return False
    return holding.batch_s - (now - holding.running_since) > local_s
