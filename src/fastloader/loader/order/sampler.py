"""Which sample indices a rank reads in an epoch: a pure function of its seeds, plus a sampler."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from fastloader.checks import int_at_least
from fastloader.errors import FastloaderError, invalid_argument, invalid_type
from fastloader.loader.order.epoch_order import default_kind, rank_share, shard
from fastloader.loader.order.resume import (
    STATE_VERSION,
    Moved,
    Resume,
    check_state,
    sampler_identity,
)
from fastloader.loader.order.shard_shuffle import per_rank_count, shard_epoch_indices


def samples_per_rank(n: int, world_size: int, drop_last: bool) -> int:
    """How many indices each rank gets: like torch's DistributedSampler (pad, or drop the tail)."""
    if drop_last:
        return n // world_size
    return -(-n // world_size)


def epoch_indices(
    n: int,
    epoch: int,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
    drop_last: bool = False,
) -> np.ndarray:
    """Return this rank's sample indices (int64) for one epoch.

    The order is a permutation drawn from numpy's PCG64 seeded by (seed, epoch) (from
    ORDER_LIMIT samples on, a seeded bijection: loader/order/epoch_order.py), identical on every
    rank; rank r takes positions r, r + world_size, ... of it. Without drop_last the
    order is padded by wrapping around to the start so every rank gets the same count
    (DistributedSampler's rule); with drop_last the tail that would be uneven is dropped.
    """
    int_at_least("n", n, 0)
    int_at_least("epoch", epoch, 0)
    int_at_least("seed", seed, 0)
    int_at_least("world_size", world_size, 1)
    int_at_least("rank", rank, 0)
    if rank >= world_size:
        raise invalid_argument(
            "rank", rank, f"must be < world_size={world_size}", "Pass 0 <= rank < world_size."
        )
    if shuffle:
        return rank_share(n, epoch, seed, 0, rank, world_size, drop_last, default_kind(n))
    return shard(np.arange(n, dtype=np.int64), rank, world_size, drop_last)


def sampler_order(source: Any, n: int, seed: int, epoch: int) -> np.ndarray:
    """One epoch of a user's sampler (any iterable of indices), made reproducible.

    The sampler's set_epoch(epoch) is called when it has one, and a torch Generator it keeps in
    `.generator` (RandomSampler, WeightedRandomSampler, SubsetRandomSampler) is reseeded from
    (seed, epoch) first: the same epoch then gives the same order in every run, on every
    rank, which sharding and exact resume need.
    """
    import torch  # only with a sampler: torch's samplers hold torch Generators

    if callable(getattr(source, "set_epoch", None)):
        source.set_epoch(epoch)
    if hasattr(source, "generator"):
        entropy = np.random.SeedSequence([seed, epoch]).generate_state(2, np.uint64)
        source.generator = torch.Generator().manual_seed(int(entropy[0] >> np.uint64(1)))
    order = np.fromiter((int(i) for i in source), dtype=np.int64)
    if len(order) and (order.min() < 0 or order.max() >= n):
        bad = int(order.min() if order.min() < 0 else order.max())
        raise invalid_argument("sampler", source, f"it yielded index {bad}, outside the "
                               f"dataset's 0..{n - 1}", "Sample indices of this dataset.")
    return order


class EpochSampler:
    """This rank's indices for the current epoch; iterable like a DataLoader sampler."""

    def __init__(
        self,
        n: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> None:
        self.n = int_at_least("n", n, 0)
        self.seed = int_at_least("seed", seed, 0)
        self.world_size = int_at_least("world_size", world_size, 1)
        self.rank = int_at_least("rank", rank, 0)
        if self.rank >= self.world_size:
            raise invalid_argument(
                "rank", rank, f"must be < world_size={world_size}", "Pass 0 <= rank < world_size."
            )
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self.source: Any = None  # a user's sampler= (an iterable of indices), or None
        # The shard-aware shuffle (loader/order/shard_shuffle.py): (shard starts, counts, window W),
        # or None for the plain permutation.
        self.shard_layout: tuple[np.ndarray, np.ndarray, int] | None = None
        # rank/world read from torch.distributed at each pass, not fixed at construction.
        self.follow_distributed = False
        # What a checkpoint must match besides the arguments: the dataset's fingerprint (set
        # by the loader, loader/order/resume.py) and the sampler's (set with `source`).
        self.dataset_id: str | None = None
        self.sampler_id: str | None = None
        # A loaded state's epoch and the pass it resumes (EpochSampler.load), or None.
        self.resume: Resume | None = None
        # The shuffled order's kind (loader/order/epoch_order.py): a checkpoint's run keeps its own.
        self.order_kind = default_kind(self.n)
        # A pass of self.epoch handed out a batch and no set_epoch() chose the next one since:
        # the next pass takes epoch + 1 (DataLoader reshuffles on every iter(), even after a
        # break).
        self._used = False

    @classmethod
    def for_loader(cls, n: int, seed: int, rank: int | None, world_size: int | None,
                   shuffle: bool, drop_last: bool, source: Any = None) -> EpochSampler:
        """A loader's sampler: rank and world as given, or (both None) those of
        torch.distributed when each pass starts, so a loader built before
        init_process_group shards once the group exists instead of reading everything.
        `source`: a user's sampler (any sized iterable of indices) giving each epoch's order
        before sharding, instead of the seeded permutation."""
        resolved_rank, world = resolve_rank_world(rank, world_size)
        sampler = cls(n, seed, resolved_rank, world, shuffle, drop_last)
        sampler.follow_distributed = rank is None
        if source is not None:
            # an order that shuffles and shares itself (a mix's MixOrder) takes shuffle; a
            # user's sampler sets the order itself, as DataLoader's does
            if shuffle and not hasattr(source, "rank_share"):
                raise invalid_argument("shuffle", shuffle, "sampler= sets the order itself",
                                       "Pass shuffle=False with a sampler, as DataLoader "
                                       "requires (a random sampler shuffles).")
            if not hasattr(source, "__iter__") or not hasattr(source, "__len__"):
                raise invalid_type("sampler", source, "a sized iterable of sample indices "
                                   "(a torch Sampler, a list, a range)")
            sampler.source = source
            sampler.sampler_id = sampler_identity(source)
        return sampler

    def refresh(self) -> None:
        """Re-read rank and world from torch.distributed (only when neither was given)."""
        if self.follow_distributed:
            self.rank, self.world_size = resolve_rank_world(None, None)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order __iter__ (and the loader) produces next."""
        self.epoch = int_at_least("epoch", epoch, 0)
        self._used = False

    def begin_pass(self) -> int:
        """The epoch of a pass that starts now (see set_epoch and next_epoch): the next one
        once a pass of this epoch handed out a batch (mark_used), else this one."""
        self.refresh()
        if self._used:
            self.epoch += 1
        self._used = False
        return self.epoch

    def mark_used(self) -> None:
        """A pass of the current epoch handed out its first batch: the next pass reads the
        next epoch. An iter() that yields nothing (Lightning probes a loader's iterability
        so) leaves the epoch, and a loaded resume, to the pass after it, as torch's
        RandomSampler draws its order only at the first batch."""
        self._used = True

    def next_epoch(self) -> int:
        """The epoch the next pass will read when no pass is running."""
        return self.epoch + 1 if self._used else self.epoch

    def _share(self, epoch: int, start: int) -> np.ndarray:
        """This rank's share of the epoch's global order from `start`: of the user's
        sampler's order, of 0..n-1, or of the seeded shuffle (evaluated at this rank's
        positions only where it is a bijection)."""
        share_of = getattr(self.source, "rank_share", None)
        if callable(share_of):  # its own share rule (a weighted mix: loader/order/mix_order.py)
            return np.asarray(share_of(self.seed, epoch, start, self.rank, self.world_size,
                                       self.drop_last, self.order_kind), dtype=np.int64)
        if self.source is not None:
            order = sampler_order(self.source, self.n, self.seed, epoch)[start:]
        elif not self.shuffle:
            order = np.arange(start, self.n, dtype=np.int64)
        else:
            return rank_share(self.n, epoch, self.seed, start, self.rank, self.world_size,
                              self.drop_last, self.order_kind)
        return shard(order, self.rank, self.world_size, self.drop_last)

    def _count(self, world_size: int | None = None, drop_last: bool | None = None,
               over: Moved | None = None) -> int:
        """Length of the order a pass starts into: the epoch's (global); under the
        shard-aware shuffle this rank's own (the same on every rank), or the sequence `over`
        names (a pass moved to another world size: what each old rank had left)."""
        if self.shard_layout is None:
            return self.n if self.source is None else len(self.source)
        if over is not None:
            world, drop, position = over
            return world * (per_rank_count(self.shard_layout[1], world, self.seed, drop)
                            - position)
        return per_rank_count(self.shard_layout[1], world_size or self.world_size,
                              self.seed, self.drop_last if drop_last is None else drop_last)

    def _pass(self, epoch: int | None = None) -> tuple[int, int, Moved | None]:
        """(start, first, over) of `epoch`'s pass (Resume.layout); (0, 0, None) unless a
        loaded state resumes that epoch."""
        epoch = self.epoch if epoch is None else epoch
        if self.resume is None or self.resume.epoch != epoch:
            return 0, 0, None
        return self.resume.layout(self.world_size)

    def pass_layout(self, epoch: int | None = None) -> tuple[int, int]:
        """(start, first) of `epoch`'s pass: where in the order it begins and the number of
        its first batch; (0, 0) unless a loaded state resumes that epoch."""
        return self._pass(epoch)[:2]

    def _strided(self, over: Moved | None) -> bool:
        """Whether a pass shares its order strided among the ranks (positions count the whole
        run's samples), not read per rank (the shard-aware shuffle's own pass)."""
        return self.shard_layout is None or over is not None

    def moved_sequence(self, epoch: int, over: Moved) -> np.ndarray:
        """What each rank of the run `over` names had left of its shard-aware order of
        `epoch`, rank after rank (each rank's stretch keeps its window of shards)."""
        if self.shard_layout is None:  # pragma: no cover - Resume sets over only with shards
            raise FastloaderError("internal: a moved shard sequence without shards")
        starts, counts, window = self.shard_layout
        world, drop, position = over
        return np.concatenate([shard_epoch_indices(starts, counts, epoch, self.seed, r, world,
                                                   window, self.shuffle, drop)[position:]
                               for r in range(world)])

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's indices of `epoch`'s pass (default: the current one) as an int64 array:
        its share of the order from where the pass begins (the epoch's start, or where a
        loaded state left off).

        Rank and world are read from torch.distributed now (unless given), as a pass does:
        read before the first pass, after init_process_group, it shows this rank's share.
        """
        self.refresh()
        epoch = self.epoch if epoch is None else epoch
        start, _, over = self._pass(epoch)
        if over is not None:
            return shard(self.moved_sequence(epoch, over)[start:], self.rank, self.world_size,
                         self.drop_last)
        if self.shard_layout is not None and self.source is None:
            starts, counts, window = self.shard_layout
            mine = shard_epoch_indices(starts, counts, epoch, self.seed, self.rank,
                                       self.world_size, window, self.shuffle, self.drop_last)
            return mine[start:]
        return self._share(epoch, start)

    def num_batches(self, batch_size: int, drop_last: bool | None = None) -> int:
        """The number after this rank's last batch of the current epoch's pass (the pass's
        first batch number, 0 unless resumed, plus its batches of `batch_size`)."""
        drop = self.drop_last if drop_last is None else drop_last
        count = len(self)
        return self.pass_layout()[1] + (count // batch_size if drop else -(-count // batch_size))

    def reported_batches(self, batch_size: int, drop_last: bool | None = None) -> int:
        """A loader's len(): the batches of a fresh epoch of this shape, or num_batches where
        a pass resumed from another shape ends later. Never less than a fresh epoch's: Lightning
        reads len() once, after loading a checkpoint, as every later epoch's length."""
        drop = self.drop_last if drop_last is None else drop_last
        end = self.num_batches(batch_size, drop)
        if self.pass_layout()[1] == 0:
            return end
        count = samples_per_rank(self._count(), self.world_size, drop) \
            if self.shard_layout is None else self._count()  # a fresh epoch's
        return max(end, count // batch_size if drop else -(-count // batch_size))

    def state(self, batches_done: int, batch_size: int, drop_last: bool,
              epoch: int | None = None) -> dict[str, Any]:
        """A loader's checkpoint: where the whole run stands in which epoch (the same on every
        rank), plus what must match on load (loader/order/resume.py).

        FastLoader and DaliLoader share this layout, so checkpoints move between backends.
        """
        self.refresh()
        epoch = self.epoch if epoch is None else epoch
        start, first, over = self._pass(epoch)
        per_step = batch_size * (self.world_size if self._strided(over) else 1)
        position = min(start + (batches_done - first) * per_step, self._count(over=over))
        return {"version": STATE_VERSION, "epoch": epoch, "batches_done": batches_done,
                "position": position, "pass_start": start, "pass_batch": first,
                "seed": self.seed, "num_samples": self.n, "batch_size": batch_size,
                "rank": self.rank, "world_size": self.world_size, "shuffle": self.shuffle,
                "drop_last": drop_last, "order": self.order_kind, "dataset": self.dataset_id,
                "sampler": self.sampler_id,
                "moved_shards": None if over is None else list(over),
                **({"shuffle_window": self.shard_layout[2]} if self.shard_layout else {})}

    def load(self, state: object, batch_size: int, drop_last: bool) -> int:
        """Take a checkpoint of this run, saved on any rank of any world size, batch size or
        drop_last (or refuse it naming the field): set the epoch and the pass it resumes, and
        return the number of the pass's next batch."""
        saved = check_state(state, self.state(0, batch_size, drop_last))
        same = (saved.batch_size, saved.drop_last) == (batch_size, drop_last)
        over = saved.moved_shards if self.shard_layout is not None else None
        per_step = saved.batch_size * (saved.world_size if self._strided(over) else 1)
        position = min(saved.pass_start + (saved.done - saved.pass_batch) * per_step,
                       self._count(saved.world_size, saved.drop_last, over))
        resume = Resume(saved.epoch, saved.world_size if same else None,
                        (saved.pass_start, saved.pass_batch), (position, saved.done),
                        saved.world_size, self.shard_layout is not None, saved.drop_last, over)
        before = (self.epoch, self._used, self.resume, self.order_kind)
        self.set_epoch(saved.epoch)
        self.resume = resume
        self.order_kind = saved.order  # the run's own, this epoch and the next
        try:
            total = self.num_batches(batch_size, drop_last)
            first = self.pass_layout()[1]
            if not first <= saved.done <= total:
                raise invalid_argument("state['batches_done']", saved.done,
                                       f"must be in {first}..{total}",
                                       "Pass a dict saved by the loader's state_dict().")
        except BaseException:  # a refused state leaves the loader as it was
            self.epoch, self._used, self.resume, self.order_kind = before
            raise
        if saved.done == total > 0:  # nothing left of that epoch: the next one, fresh
            self.set_epoch(saved.epoch + 1)
            return 0
        return saved.done

    def __iter__(self) -> Iterator[int]:
        self.refresh()
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        """This rank's samples in the current epoch's pass (all of its share, unless a loaded
        state resumes the epoch: then what is left)."""
        self.refresh()
        start, _, over = self._pass()
        if not self._strided(over):
            return max(self._count() - start, 0)
        return samples_per_rank(self._count(over=over) - start, self.world_size,
                                self.drop_last)

    def __repr__(self) -> str:
        return (
            f"EpochSampler(n={self.n}, epoch={self.epoch}, seed={self.seed}, rank={self.rank}, "
            f"world_size={self.world_size}, shuffle={self.shuffle}, drop_last={self.drop_last})"
        )


def resolve_rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size) as given, else from torch.distributed when initialized, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise invalid_argument(
            "rank" if rank is not None else "world_size", rank if rank is not None else world_size,
            "rank and world_size go together", "Pass both, or neither to read torch.distributed.",
        )
    if rank is not None and world_size is not None:
        world = int_at_least("world_size", world_size, 1)
        if int_at_least("rank", rank, 0) >= world:
            raise invalid_argument("rank", rank, f"must be < world_size={world}",
                                   "Pass 0 <= rank < world_size.")
        return int(rank), world
    import torch.distributed as dist  # only when asked: importing torch is not free

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def planned_world(rank: int | None, world_size: int | None) -> int:
    """The world size to share this machine's cores by: as given, else torch.distributed's,
    else (before init_process_group) the WORLD_SIZE a launcher such as torchrun announced."""
    _, world = resolve_rank_world(rank, world_size)
    announced = os.environ.get("WORLD_SIZE", "")
    if world_size is None and world == 1 and announced.isdigit() and int(announced) > 1:
        return int(announced)
    return world


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity where the OS has one, else all of them."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, cores or 1)


def threads_per_rank(world_size: int) -> int:
    """Cores this process may use (sched_getaffinity), shared among ranks on this machine."""
    cores = usable_cores()
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    local_ranks = int(local) if local.isdigit() and int(local) > 0 else 1
    if world_size == 1:
        local_ranks = 1
    return max(1, (cores or 1) // local_ranks)
