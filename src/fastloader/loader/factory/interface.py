"""LoaderInterface: what every loader implements (iteration, len, set_epoch, state_dict /
load_state_dict, stats, close) and the lifetime they share (context manager, __del__, tracking).

fastloader.FastLoader (loader/factory/base.py) subclasses it and adds the factory; every loader
subclasses FastLoader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

from fastloader.loader.factory.lifetime import track
from fastloader.loader.pipeline.stats import LoaderStats

Loader = TypeVar("Loader", bound="LoaderInterface")


class LoaderInterface:
    """The methods and DataLoader attributes every loader has; FastLoader's docstring says what
    they do together."""

    # A loader is closed until its __init__ finished: close() and __del__ on one whose
    # arguments were refused have nothing to free.
    _closed = True

    # The DataLoader attributes every loader has (each sets or forwards them).
    batch_size: Any  # int on the packed paths; DataLoader's (int | None) on the drop-in path
    drop_last: bool
    dataset: Any
    sampler: Any

    # -- the interface every loader implements ----------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch of the next pass (its order, crops and flips).

        Args:
            epoch: the epoch, >= 0.

        Raises:
            InvalidArgumentError: epoch < 0.
        """
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands, for load_state_dict to resume exactly.

        Returns:
            dict: epoch, batches done in it, the whole run's position in the epoch's order,
            and what a loader must match to load it.
        """
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a state_dict: the next pass yields exactly the batches left.

        Loading during a pass ends that pass. A checkpoint is global: any rank's, of a run of
        any world size, batch size or drop_last, resumes every rank (docs/resuming.md).

        Args:
            state: a dict from state_dict() of a loader over the same dataset, with the same
                seed, shuffle, shuffle_window and sampler.

        Raises:
            InvalidArgumentError: the state does not match this loader (it names the field).
            InvalidTypeError: state is not a dict.
        """
        raise NotImplementedError

    def stats(self) -> LoaderStats:
        """Live counters.

        Returns:
            LoaderStats: a snapshot; .as_dict() gives a plain dict.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Free threads, buffers and an owned dataset; safe to call twice."""
        raise NotImplementedError

    def _after_fork_in_child(self) -> None:
        """Called in a forked child: forget threads and locks that only the parent has."""

    def _built(self) -> None:
        """The end of a loader's __init__: it is open, closed at exit and told after fork()."""
        self._closed = False
        track(self)

    # -- lifetime, shared ---------------------------------------------------------------------

    def __enter__(self: Loader) -> Loader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # try/except, not contextlib.suppress: at interpreter shutdown this module's globals
        # may already be None, and the lookup itself would print "Exception ignored in".
        try:  # noqa: SIM105 (see above)
            self.close()
        except Exception:
            pass
