"""Epochs, passes and exact resume: the bookkeeping the packed and DALI loaders share."""

from __future__ import annotations

from typing import Any

from fastloader.loader.sampler import EpochSampler


class EpochPasses:
    """len, set_epoch and state_dict/load_state_dict over an EpochSampler.

    A loader using it sets `sampler`, `batch_size`, `drop_last`, `_active` (the pass now
    iterating, or None), `_batches_done` (batches that pass handed out) and `_resume_batch`
    (where the next pass starts), and implements `_end_active_pass()`.
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

    def __len__(self) -> int:
        return self.sampler.num_batches(self.batch_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch of the next pass (a pending resume of that same epoch is kept)."""
        if epoch != self.sampler.epoch:
            self._resume_batch = 0
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: epoch and batches consumed, plus what must match on load.

        During a pass: that pass's epoch and the batches it handed out; between passes: the
        pass the next iter() starts.
        """
        if self._active is not None:
            return self.sampler.state(self._batches_done, self.batch_size, self.drop_last)
        return self.sampler.state(self._resume_batch, self.batch_size, self.drop_last,
                                  epoch=self.sampler.next_epoch())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next pass yields exactly the batches an uninterrupted run had left."""
        epoch, done = self.sampler.check_state(state, self.batch_size, self.drop_last)
        self._end_active_pass()
        self.sampler.set_epoch(epoch)
        self._resume_batch = done
