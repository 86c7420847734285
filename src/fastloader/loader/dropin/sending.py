"""Worker batches that cannot cross to the main process become an error there, not a hang: the
drop-in's collate_fn wraps each worker's batch in a Parcel, pickled as the batch itself or, when
the batch does not pickle, as DataLoader's ExceptionWrapper of an error naming what failed."""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

from torch.utils.data import get_worker_info
from torch.utils.data._utils import ExceptionWrapper

from fastloader.errors import ProducerError


class Parcel:
    """A batch on its way from a worker. multiprocessing's queue pickles results on a feeder
    thread that only prints a pickling error, so a batch that does not pickle would never
    arrive and DataLoader would wait for it forever. A Parcel pickles the batch first, inside
    its own reduction: unpickled in the main process it is the batch again (its pickled bytes
    are pickled once more, a copy; a tensor's are a shared-memory handle), or an
    ExceptionWrapper, which DataLoader raises for that batch before going on with the next."""

    __slots__ = ("batch",)

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        buffer = io.BytesIO()
        try:
            ForkingPickler(buffer).dump(self.batch)
        except Exception as error:  # any failure to pickle is reported the same
            return _arrived, (unsendable(error),)
        # getvalue() hands over the buffer's bytes without a copy where bytes(dumps()) made one
        # (a 9.6 MB array batch: 19 -> 14 ms a batch on the worker's side)
        return pickle.loads, (buffer.getvalue(),)


def _arrived(value: Any) -> Any:
    return value


def unsendable(error: BaseException) -> ExceptionWrapper:
    """The error a batch that cannot be pickled becomes: what failed, where, and the fix."""
    info = get_worker_info()
    where = "a DataLoader worker" if info is None else f"DataLoader worker process {info.id}"
    try:
        raise ProducerError(
            f"a batch from {where} cannot be sent to the main process: "
            f"{type(error).__name__}: {error}. Batches cross from workers by pickle: define "
            "the classes of the samples (a namedtuple too) at a module's top level, not in a "
            "class body or a function, or pass num_workers=0 to load in this process."
        ) from error
    except ProducerError:
        return ExceptionWrapper(where=f"in {where}")


class SendGuard:
    """A collate_fn that puts the batch `collate_fn` makes into a Parcel (workers only)."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Parcel:
        return Parcel(self.collate_fn(samples))


def users_collate_fn(collate_fn: Any) -> Any:
    """The collate_fn DataLoader was given (or its default), without the SendGuard."""
    return collate_fn.collate_fn if isinstance(collate_fn, SendGuard) else collate_fn
