"""Epochs, passes and exact resume: the bookkeeping the packed and DALI loaders share."""

from __future__ import annotations

from typing import Any

from fastloader.errors import FastloaderError
from fastloader.loader.order.sampler import EpochSampler


def ended_pass() -> FastloaderError:
    """The error of an iterator whose pass is no longer the loader's active one."""
    return FastloaderError("this iterator was ended because a newer pass over the same "
                           "FastLoader started, or it was closed, or this process was forked "
                           "from the one that began it; start a new pass with iter(loader)")


class EpochPasses:
    """len, set_epoch and state_dict/load_state_dict over an EpochSampler.

    A loader using it sets `sampler`, `batch_size`, `drop_last`, `_active` (the pass now
    iterating, or None), `_batches_done` (batches that pass handed out) and `_resume_batch`
    (where the next pass starts), calls `_first_batch_out()` as a pass yields its first
    batch, and implements `_end_active_pass()`.
    """

    sampler: EpochSampler
    batch_size: int
    drop_last: bool
    _active: Any
    _batches_done: int
    _resume_batch: int

    def _end_active_pass(self) -> None:
        """Stop the pass now iterating, if any (a new pass or a load_state_dict ends it)."""
        raise NotImplementedError

    def _first_batch_out(self) -> None:
        """A pass handed out its first batch: a pending resume is spent, and the next pass
        reads the next epoch (until then a new iter() starts this pass again)."""
        self._resume_batch = 0
        self.sampler.mark_used()

    def _pass_end(self) -> int:
        """The number after the last batch of the current epoch's pass."""
        return self.sampler.num_batches(self.batch_size, self.drop_last)

    def _pass_finished(self, epoch: int) -> None:
        """A pass of `epoch` ran to its end (even one left with no batch to hand out)."""
        self._batches_done = 0
        self._resume_batch = 0
        self.sampler.set_epoch(epoch + 1)

    def __len__(self) -> int:
        """Batches of an epoch; in an epoch resumed from another shape's checkpoint, the
        number after its last batch where that is larger (EpochSampler.reported_batches)."""
        return self.sampler.reported_batches(self.batch_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch of the next pass (a pending resume of that same epoch is kept)."""
        if epoch != self.sampler.epoch:
            self._resume_batch = 0
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: epoch and batches consumed, plus what must match on load.

        During a pass: that pass's epoch and the batches it handed out, or, once it handed
        out its last batch (StopIteration not reached yet), the next epoch's start; between
        passes: the pass the next iter() starts.
        """
        if self._active is not None:
            if self._batches_done == self._pass_end() > 0:  # nothing left: the next epoch
                return self.sampler.state(0, self.batch_size, self.drop_last,
                                          epoch=self.sampler.epoch + 1)
            return self.sampler.state(self._batches_done, self.batch_size, self.drop_last)
        return self.sampler.state(self._resume_batch, self.batch_size, self.drop_last,
                                  epoch=self.sampler.next_epoch())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next pass yields the batches an uninterrupted run had left.

        The state may come from any rank of a run of any world size, batch size or drop_last
        (loader/order/resume.py): on the same shape the saved pass continues exactly; on another
        the samples of the epoch no rank delivered yet are shared among this world's ranks.
        A checkpoint of a whole epoch (batches_done == len, as state_dict wrote at an epoch's
        end before it moved on) resumes at the next epoch's first batch, not an empty pass.
        """
        resume_batch = self.sampler.load(state, self.batch_size, self.drop_last)
        self._end_active_pass()
        self._resume_batch = resume_batch
