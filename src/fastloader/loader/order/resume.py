"""Global checkpoints: what a loader's state_dict() says, and how another shape resumes it.

A state describes the whole run's place in the epoch, not one rank's: the epoch's order is a
function of (seed, epoch, the dataset or sampler) alone, a pass hands rank r the positions
r, r + W, r + 2W, ... of it (from where the pass began), and every rank takes the same number
of batches, so after any step the samples delivered anywhere are a prefix of that order.
`position` is that prefix's length (a load computes it again from the pass fields, so a
hand-edited batches_done moves it too). A loader of another world size, batch size or
drop_last shares the rest of the order among its ranks the same way (a "moved" pass, numbered
on from the batches already done); the same shape continues the saved pass exactly. Nothing
here depends on how the order was drawn, only that it is a function of shape-independent
inputs: an order over several sources (a weighted mix) resumes by the same rule.

Under the shard-aware shuffle (shuffle_window) each rank's order is its own shards', chosen
for its world size, so there `position` counts this rank's order (the same on every rank):
another batch size or drop_last continues each rank's order from it. Another world size
mid-epoch reads the sequence of what every old rank had left, rank after rank (each stretch
keeps its windows of shards), strided among the new ranks like the global order; `position`
then counts that sequence, and `moved_shards` names it, so it moves again the same way.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastloader.checks import int_at_least
from fastloader.errors import invalid_argument, invalid_type
from fastloader.loader.order.epoch_order import BIJECTION, PERMUTATION

STATE_VERSION = 2  # 1: epoch and batches_done of one shape only (still loaded)
# What a state and a loader must agree on: the order of the epoch depends on each.
IDENTITY = ("num_samples", "seed", "shuffle", "shuffle_window", "dataset", "sampler")
_V1_IDENTITY = ("num_samples", "seed", "shuffle", "shuffle_window")  # v1 has no fingerprints
_SAMPLER_FIELDS = ("weights", "indices", "num_samples", "replacement")


def dataset_identity(dataset: Any) -> str | None:
    """A short fingerprint of a packed dataset's content: its classes, shards' and index
    files' sha256 (from the manifest: nothing is read); a mix's, its sources' by name. None
    for a dataset without one."""
    sources = getattr(dataset, "sources", None)
    if sources is not None:  # a mix (format/mixed.MixedDataset): its named sources' own
        return _digest(json.dumps([[name, dataset_identity(s)] for name, s in
                                   zip(dataset.source_names, sources, strict=True)]).encode())
    manifest = getattr(dataset, "manifest", None)
    if manifest is None:
        return None
    content = {"classes": list(manifest.classes),
               "shards": [[s.count, s.sha256] for s in manifest.shards],
               "fields": {name: f.sha256 for name, f in sorted(manifest.fields.items())}}
    return _digest(json.dumps(content, sort_keys=True).encode())


def sampler_identity(source: Any) -> str | None:
    """A fingerprint of a user's sampler=: its class, length and what sets its order (a
    WeightedRandomSampler's weights, a SubsetRandomSampler's indices, a list's items)."""
    if source is None:
        return None
    parts: list[bytes] = [type(source).__qualname__.encode(), str(len(source)).encode()]
    if isinstance(source, (list, tuple, range, np.ndarray)) or hasattr(source, "numpy"):
        parts.append(np.asarray(list(source) if isinstance(source, range) else source,
                                dtype=np.int64).tobytes())
    for name in _SAMPLER_FIELDS:
        value = getattr(source, name, None)
        if value is not None:
            parts.append(name.encode() + _as_bytes(value))
    return _digest(b"\0".join(parts))


def _as_bytes(value: object) -> bytes:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, list, tuple, range)):
        return np.ascontiguousarray(np.asarray(value, dtype=np.float64)).tobytes()
    return repr(value).encode()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


# Under the shard-aware shuffle a pass that moved to another world size mid-epoch reads what
# the ranks of the run it left had left, rank after rank: that run's (world_size, drop_last,
# position in each rank's order) names the sequence (EpochSampler.moved_sequence).
Moved = tuple[int, bool, int]


@dataclass(frozen=True)
class Resume:
    """Where a loaded state's epoch resumes: the saved pass itself on the saved world size
    (`exact`), or a pass over the rest of the order on any other (`moved`); each is
    (start, first): the order's position the pass begins at and the number of its first batch.

    `same_world` is the saved world size when batch size and drop_last match (else None: every
    world size takes the moved pass). `per_rank`: the shard-aware shuffle, where positions
    count each rank's own order; moved to another world size mid-epoch, its pass reads the
    sequence of what the old ranks had left (`over`: the saved pass's, or a new one).
    """

    epoch: int
    same_world: int | None
    exact: tuple[int, int]
    moved: tuple[int, int]
    saved_world: int
    per_rank: bool
    saved_drop: bool = False
    over: Moved | None = None  # the sequence the saved pass itself read, if it had moved

    def layout(self, world_size: int) -> tuple[int, int, Moved | None]:
        """(start, first, over) of this epoch's pass on `world_size` ranks: `over` names the
        sequence a moved shard-aware pass reads (None: the epoch's order, or each rank's)."""
        if world_size == self.same_world:
            return (*self.exact, self.over)
        if self.over is None and self.per_rank and world_size != self.saved_world and \
                self.moved[0] > 0:  # each old rank's rest, read as one sequence from its start
            return 0, self.moved[1], (self.saved_world, self.saved_drop, self.moved[0])
        return (*self.moved, self.over)


@dataclass(frozen=True)
class SavedState:
    """A checked state_dict: its epoch and batches, and the pass and shape it was saved in."""

    epoch: int
    done: int
    pass_start: int
    pass_batch: int
    world_size: int
    batch_size: int
    drop_last: bool
    order: str  # the shuffled order's kind its run used (loader/order/epoch_order.py)
    moved_shards: Moved | None = None  # the sequence its pass read, if it had moved (Moved)


def check_state(state: object, mine: dict[str, Any]) -> SavedState:
    """The state's fields that say where it stands, after its identity matched `mine` (a
    state of this loader), or an error naming the first field that does not."""
    if not isinstance(state, dict):
        raise invalid_type("state", state, "a dict from the loader's state_dict()")
    version = state.get("version")
    if version not in (1, STATE_VERSION):
        raise invalid_argument("state['version']", version,
                               f"this fastloader reads versions 1 and {STATE_VERSION}",
                               "Pass a dict saved by a loader's state_dict().")
    for key in IDENTITY if version == STATE_VERSION else _V1_IDENTITY:
        if state.get(key) != mine.get(key):
            raise invalid_argument(
                f"state[{key!r}]", state.get(key), f"this loader has {key}={mine.get(key)!r}, "
                "and the epoch's order depends on it",
                "Resume with a loader over the same dataset, with the same seed, shuffle, "
                "shuffle_window and sampler= (world size, batch size, drop_last and threads "
                "may change).")
    done = int_at_least("state['batches_done']", state.get("batches_done"), 0)
    start, first, order, moved = 0, 0, PERMUTATION, None  # version 1: the permutation
    if version == STATE_VERSION:
        kind = state.get("order")
        if kind not in (PERMUTATION, BIJECTION):
            raise invalid_argument("state['order']", kind,
                                   f"must be {PERMUTATION!r} or {BIJECTION!r}",
                                   "Pass a dict saved by the loader's state_dict().")
        order = str(kind)
        moved = _moved_shards(state.get("moved_shards"))
        start = int_at_least("state['pass_start']", state.get("pass_start"), 0)
        first = int_at_least("state['pass_batch']", state.get("pass_batch"), 0)
        if first > done:
            raise invalid_argument("state['pass_batch']", first,
                                   f"exceeds batches_done={done}",
                                   "Pass a dict saved by the loader's state_dict().")
    drop = state.get("drop_last")
    if not isinstance(drop, bool):
        raise invalid_type("state['drop_last']", drop, "a bool")
    return SavedState(int_at_least("state['epoch']", state.get("epoch"), 0), done, start,
                      first, int_at_least("state['world_size']", state.get("world_size"), 1),
                      int_at_least("state['batch_size']", state.get("batch_size"), 1), drop,
                      order, moved)


def _moved_shards(value: object) -> Moved | None:
    """A state's `moved_shards`: None, or [world_size >= 1, drop_last, position >= 0]."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 3 or \
            not isinstance(value[1], bool):
        raise invalid_type("state['moved_shards']", value,
                           "None or [world_size, drop_last, position]")
    return (int_at_least("state['moved_shards'][0]", value[0], 1), value[1],
            int_at_least("state['moved_shards'][2]", value[2], 0))
