"""The shard plan of a sample pack: the samples cut into shards by a rule of the samples alone.

An importer's samples (a table, file groups, .tar shards, COCO) name their image, so each has a
size hint known without preparing it (the primary image's file size by stat, a TarMember's
size, len(bytes), an ndarray's nbytes): they are cut by plan.cut's rule (shard_size bytes of
hints, at least one sample, at most MAX_SHARD_FILES). Python samples would need their
__getitem__ run on the driver for a hint, so they are cut by count alone: every shard_samples
samples (default: shard_size / 128 KiB). Neither rule looks at the workers, the engine or the
machines: the same source and options give the same shards, records and index arrays.
The bounds and hints are compact int64 arrays, saved with the source's description (to reopen
it in a shard task) in the staging folder's plan/ folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastloader.checks import int_at_least
from fastloader.errors import PackError
from fastloader.pack.sources.values import TarMember
from fastloader.pack.staging.plan import MAX_SHARD_FILES, PLAN_DIR, cut

SAMPLE_BYTES = 128 << 10  # what a Python sample is assumed to weigh: shard_samples' default
_BOUNDS, _SIZES, _META = "sample_bounds.npy", "sample_sizes.npy", "samples.json"


def default_shard_samples(shard_size: int) -> int:
    """Samples per shard of Python samples when not given: shard_size / 128 KiB (at least 1)."""
    return max(1, shard_size // SAMPLE_BYTES)


def check_shard_samples(shard_samples: Any, shard_size: int) -> int:
    """shard_samples checked (None: its default from shard_size)."""
    if shard_samples is None:
        return default_shard_samples(shard_size)
    return int_at_least("shard_samples", shard_samples, 1,
                        "Pass the number of samples per shard, e.g. 2048.")


def size_hint(value: Any) -> int:
    """A sample's image size known without reading it: 0 when unknown (a missing file)."""
    if isinstance(value, TarMember):
        return int(value.size)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (str, os.PathLike)):
        try:
            return int(os.stat(value).st_size)
        except (OSError, ValueError):
            return 0
    return 0


def size_hints(samples: Any, image: str) -> np.ndarray:
    """int64 size hints of an importer's samples (a sequence of dicts, read here: importer
    code, never a user's __getitem__); a sequence may give them itself (size_hints(): COCO's
    MaskedSamples, groups.TarSamples), without building each sample."""
    if hasattr(samples, "size_hints"):
        return np.asarray(samples.size_hints(), np.int64)
    hints = np.zeros(len(samples), np.int64)
    for i in range(hints.size):
        sample = samples[i]
        if isinstance(sample, dict):
            hints[i] = size_hint(sample.get(image))
    return hints


@dataclass
class SamplePlan:
    """Shard k holds samples bounds[k]..bounds[k+1]; sizes are their hints (zeros when cut by
    count); reopen describes an importer's source for a task to open it again (None: Python
    samples, handed to the tasks)."""

    bounds: np.ndarray  # int64 (shards + 1,)
    sizes: np.ndarray  # int64 (n,)
    fingerprint: str = ""  # the source's (importers.fingerprint); "" for Python samples
    reopen: dict[str, Any] | None = None
    fields: list[dict[str, Any]] = field(default_factory=list)  # the specs' manifest entries

    def __len__(self) -> int:
        return int(self.bounds[-1])

    @property
    def num_shards(self) -> int:
        return int(self.bounds.size) - 1

    def span(self, k: int) -> tuple[int, int]:
        return int(self.bounds[k]), int(self.bounds[k + 1])

    def digest(self, k: int) -> str:
        """What shard k's part was made from (the source's fingerprint and its range): a part
        of another source or range is not reused."""
        lo, hi = self.span(k)
        return hashlib.sha256(f"{self.fingerprint}:{lo}:{hi}".encode()).hexdigest()

    def relpath(self, i: int) -> str:
        """How a refusal names sample i."""
        return f"sample {i}"

    def save(self, staging: Path) -> None:
        folder = staging / PLAN_DIR
        folder.mkdir(exist_ok=True)
        for name, array in ((_BOUNDS, self.bounds), (_SIZES, self.sizes)):
            with open(folder / name, "wb") as handle:
                np.save(handle, array, allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
        meta = {"fingerprint": self.fingerprint, "reopen": self.reopen, "fields": self.fields}
        (folder / _META).write_text(json.dumps(meta, sort_keys=True))

    @classmethod
    def load(cls, staging: Path) -> SamplePlan:
        folder = staging / PLAN_DIR
        try:
            meta = json.loads((folder / _META).read_text())
            bounds = np.load(folder / _BOUNDS, allow_pickle=False)
            sizes = np.load(folder / _SIZES, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise PackError(f"{staging} holds no readable sample plan ({exc}); run `packdata "
                            "plan SRC DST` again.") from None
        plan = cls(bounds, sizes, meta["fingerprint"], meta["reopen"], meta["fields"])
        if bounds.size < 1 or bounds[0] != 0 or np.any(np.diff(bounds) <= 0) or \
                sizes.size != bounds[-1]:
            raise PackError(f"the sample plan in {staging} is damaged; run `packdata plan SRC "
                            "DST` again.")
        return plan


def is_sample_plan(staging: Path) -> bool:
    """Whether staging holds a sample pack's plan (not an ImageFolder one)."""
    return (staging / PLAN_DIR / _META).is_file()


def count_bounds(n: int, shard_samples: int) -> np.ndarray:
    """Every shard_samples samples (the last shard may be shorter)."""
    return np.append(np.arange(0, n, shard_samples, dtype=np.int64), np.int64(n))


def plan_samples(samples: Any, image: str, shard_size: int, shard_samples: int,
                 importer: bool) -> tuple[np.ndarray, np.ndarray]:
    """(bounds, sizes) of a sequence of samples: by size hints for an importer's, by count for
    Python samples."""
    n = len(samples)
    if importer:
        sizes = size_hints(samples, image)
        return cut(sizes, shard_size, MAX_SHARD_FILES), sizes
    return count_bounds(n, shard_samples), np.zeros(n, np.int64)
