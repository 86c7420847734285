"""The remote worker: a Ray actor that builds a loader's batch work once (it opens the dataset
itself: a shared path, or a URL through its own node's shard cache) and then runs batches of a
pass whose plan the trainer put in the object store.

Nothing here names a kind of records: the loader hands over a `recipe`, a picklable callable
that returns the actor's `BatchWork` (loader/packed/remote_images.py, loader/clips/remote_clips.py).
A batch's failure comes back as a value (Outcome.error) rather than a Ray task error, so the
trainer raises the error the local loader raises: the same type, stage, batch and record.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from fastloader.errors import ProducerError
from fastloader.loader.pipeline.producer import StageError


class BatchWork(Protocol):
    """What a worker runs for one kind of records."""

    def run(self, plan: Any, b: int) -> Any:
        """Batch b of the pass planned by `plan`, as the payload the trainer absorbs; raises
        StageError (read, plan, masks) or the decode's own error, as the local filler does."""


def payload_bytes(value: Any) -> int:
    """A payload's bytes on the wire: its arrays, in its fields, lists and dicts, at any depth."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(payload_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return sum(payload_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(v) for v in value)
    return 0


@dataclass(frozen=True)
class Outcome:
    """One batch's result on a worker: its payload, or the error and stage that stopped it;
    the worker's busy seconds (wall and CPU) and the payload's bytes."""

    batch: int
    payload: Any
    error: BaseException | None
    stage: str
    seconds: float
    cpu_seconds: float
    nbytes: int


def _portable(error: BaseException) -> BaseException:
    """The error itself when it pickles (Ray sends it back), else a ProducerError that says it."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return ProducerError(f"{type(error).__name__}: {error} (raised on a remote worker)")
    return error


class BatchWorker:
    """A Ray actor (wrapped by ray.remote in loader/remote/cluster.py): one pass's plan at a
    time, one batch a call."""

    def __init__(self, recipe: Callable[[], BatchWork]) -> None:
        self.work = recipe()
        self.pass_key: int | None = None
        self.plan: Any = None

    def ready(self) -> dict[str, Any]:
        """Where it runs (answered once the actor is up: the trainer's sign it joined)."""
        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def run(self, key: int, plan: list[Any], b: int) -> Outcome:
        """Batch b of pass `key`; `plan` is [ObjectRef of the pass's plan] (a list, so Ray hands
        the reference over unresolved and the plan is fetched once a pass, not once a batch)."""
        if key != self.pass_key:
            import ray

            self.plan, self.pass_key = ray.get(plan[0]), key
        started, cpu = time.perf_counter(), time.process_time()
        payload, error, stage = None, None, ""
        try:
            payload = self.work.run(self.plan, b)
        except StageError as exc:  # read, plan or masks: the cause is the dataset's error
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            error, stage = _portable(cause), exc.stage
        except Exception as exc:  # the decode's: DecodeError, CorruptRecordError, ...
            error, stage = _portable(exc), "decode"
        nbytes = payload_bytes(payload)
        return Outcome(b, payload, error, stage, time.perf_counter() - started,
                       time.process_time() - cpu, nbytes)
