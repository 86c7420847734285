"""fastloader.Remote: where and how a loader's remote workers (Ray actors) run, checked in full
before Ray is imported or anything starts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from fastloader.checks import flag, positive_int
from fastloader.errors import invalid_argument, invalid_type

ON_LOST = ("local", "raise")


def _seconds(name: str, value: object) -> float:
    """A positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid_type(name, value, "a number of seconds")
    if not math.isfinite(value) or value <= 0:
        raise invalid_argument(name, value, "must be a finite number of seconds > 0",
                               f"Pass e.g. {name}=60.")
    return float(value)


def _address(value: object) -> str | None:
    """None, "auto", "local", "ray://host:port" or "host:port" (a head's GCS address)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_type("address", value, 'None, "auto", "local" or a Ray address string')
    if value in ("auto", "local") or value.startswith("ray://") or (
            ":" in value and value.rsplit(":", 1)[1].isdigit()):
        return value
    raise invalid_argument("address", value, 'is not a Ray address', 'Pass None (this '
                           'process\'s Ray, else a new local one), "auto" (the cluster running '
                           'on this machine), "ray://HEAD:10001" or "HEAD:6379".')


def _resources(value: object) -> dict[str, float]:
    """Custom Ray resources each actor asks for: {name: amount > 0}."""
    if not isinstance(value, Mapping):
        raise invalid_type("resources", value, "a dict of resource name -> amount")
    checked: dict[str, float] = {}
    for name, amount in value.items():
        if not isinstance(name, str) or not name:
            raise invalid_type("resources", value, "a dict whose keys are resource names")
        if name in ("CPU", "GPU", "memory"):
            raise invalid_argument(f"resources[{name!r}]", amount, "is set by its own option",
                                   "Pass num_cpus= for CPUs; remote workers take no GPU.")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not (
                math.isfinite(amount) and amount > 0):
            raise invalid_argument(f"resources[{name!r}]", amount, "must be a number > 0",
                                   f"Pass e.g. resources={{{name!r}: 1}}.")
        checked[name] = float(amount)
    return checked


@dataclass(frozen=True)
class Remote:
    """Decode a loader's batches on Ray actors as well: FastLoader(path, remote=Remote(...)).

    Batches stay the local loader's, bit for bit and in order, whatever the workers do; the
    trainer keeps the order, the crops and the checkpoint (docs/remote-workers.md). Workers are
    per rank: each rank (each process that builds a loader) starts its own.

    Args:
        workers: Ray actors this loader starts, each a decoder of num_cpus threads.
        address: None: the Ray this process already joined, else a new local one on
            127.0.0.1 with the machine's CPUs, shared by this process's loaders and shut down
            when the last of them closes; "auto": the cluster running on this machine;
            "ray://HEAD:10001" or "HEAD:6379": that cluster. A process that called
            ray.init() already keeps its Ray, whatever address says.
        num_cpus: CPUs each actor reserves (and its decode threads, rounded up).
        resources: custom Ray resources each actor asks for, to place actors on CPU nodes
            (e.g. {"cpu_node": 1} with nodes started by `ray start --resources=...`).
        window: batches on the workers at most, sent or delivered and not yet taken
            (default: 4 a worker + 2: three held by each, so a worker keeps busy between
            the trainer's looks, and those delivered ahead of their turn); the object store
            never holds more of this loader's batches.
        local: the trainer's own decode threads take batches too (False: remote only).
        on_lost: when every worker is gone: "local" decodes on the trainer with a warning,
            "raise" raises after lost_timeout seconds without a live worker.
        lost_timeout: seconds to wait for a worker before on_lost applies.
        startup_timeout: seconds the loader waits for its actors to start.

    Raises:
        InvalidArgumentError: a value is out of range (workers < 1, an unknown on_lost, ...).
        InvalidTypeError: a value is of the wrong type.
    """

    workers: int = 1
    address: str | None = None
    num_cpus: float = 1
    resources: Mapping[str, float] = field(default_factory=dict)
    window: int | None = None
    local: bool = True
    on_lost: Literal["local", "raise"] = "local"
    lost_timeout: float = 60.0
    startup_timeout: float = 120.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the checked values replace the given ones
        set_(self, "workers", positive_int("workers", self.workers))
        set_(self, "address", _address(self.address))
        if isinstance(self.num_cpus, bool) or not isinstance(self.num_cpus, (int, float)):
            raise invalid_type("num_cpus", self.num_cpus, "a number of CPUs")
        if not (math.isfinite(self.num_cpus) and 0 < self.num_cpus <= 1024):
            raise invalid_argument("num_cpus", self.num_cpus, "must be in (0, 1024]",
                                   "Pass the CPUs each worker may use, e.g. num_cpus=4.")
        set_(self, "resources", _resources(self.resources))
        if self.window is not None:
            set_(self, "window", positive_int("window", self.window))
        set_(self, "local", flag("local", self.local))
        if self.on_lost not in ON_LOST:
            raise invalid_argument("on_lost", self.on_lost, "must be 'local' or 'raise'",
                                   "Pass on_lost='local' to carry on decoding on the trainer "
                                   "when every worker is gone, or 'raise' to stop.")
        set_(self, "lost_timeout", _seconds("lost_timeout", self.lost_timeout))
        set_(self, "startup_timeout", _seconds("startup_timeout", self.startup_timeout))

    @property
    def threads(self) -> int:
        """Each actor's decode threads."""
        return max(1, math.ceil(self.num_cpus))

    @property
    def in_flight(self) -> int:
        """Batches on the workers at most."""
        return self.window if self.window is not None else 4 * self.workers + 2


def check_remote(value: object) -> Remote | None:
    """FastLoader's remote= argument: None or a Remote."""
    if value is None or isinstance(value, Remote):
        return value
    raise invalid_type("remote", value, "a fastloader.Remote(...) or None")
