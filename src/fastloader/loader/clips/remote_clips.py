"""The clip loaders' remote workers (FastLoader(path, audio= or video=..., remote=Remote(...))):
what an actor runs for a batch of clips, and how the trainer takes it.

The actor opens the dataset itself and builds the loader's own ClipDecoder (the loader class's
`_decoder_for`, with the actor's thread count), then runs the local ClipBatches without a ring:
the batch is the one the CPU path makes (cut to what its clips fill), drawn from the same seed,
epoch and sample. The trainer copies it into its ring slot (CUDA) or its own array (CPU).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from fastloader.format.dataset import PackedDataset
from fastloader.loader.factory.options import ClipOptions
from fastloader.loader.pipeline.stats import Counters
from fastloader.loader.remote.cluster import WorkerPool
from fastloader.loader.remote.dispatch import RemoteBatches


class ClipFiller(Protocol):
    """The clip loader's filler (loader/clips/loader.ClipBatches), as used here. This module is
    imported by that one, so it is handed the class rather than importing it."""

    read_ahead: bool
    ring: Any
    counters: Counters
    batches: list[np.ndarray]
    seed: int
    epoch: int

    def prepare(self, b: int) -> np.ndarray: ...

    def fill(self, b: int, slot: int | None, indices: np.ndarray) -> Any: ...


@dataclass(frozen=True)
class ClipPlan:
    """One pass of a clip loader, as the workers need it: its batches' samples, seed, epoch,
    and the filler class that makes them (ClipBatches)."""

    batches: list[np.ndarray]
    seed: int
    epoch: int
    filler: type


@dataclass(frozen=True)
class ClipPayload:
    """One batch of clips from a worker."""

    clips: np.ndarray
    facts: np.ndarray
    samples: np.ndarray
    skipped: tuple[str, ...]


@dataclass(frozen=True)
class ClipRecipe:
    """What a worker needs to make a clip loader's batches; pickled to the actor."""

    loader_class: type
    options: ClipOptions
    dataset: PackedDataset
    threads: int

    def __call__(self) -> ClipWork:
        return ClipWork(self)


class ClipWork:
    """On the actor: the loader's ClipDecoder over the actor's own open dataset."""

    def __init__(self, recipe: ClipRecipe) -> None:
        self.dataset = recipe.dataset
        self.on_error = recipe.options.on_error
        options = copy.copy(recipe.options)
        options.threads = recipe.threads  # the actor's CPUs, not the trainer's
        # The loader's own decoder choice, on a bare instance that holds only the dataset
        # (_decoder_for reads self._data): the same decoder class and settings as the trainer's.
        loader: Any = object.__new__(recipe.loader_class)
        loader._data = self.dataset
        assert self.dataset.columns is not None  # clips live in a v2 dataset
        self.decoder = loader._decoder_for(options, self.dataset.columns.meta(
            self.dataset.image_field))

    def run(self, plan: ClipPlan, b: int) -> ClipPayload:
        counters = Counters()
        filler = plan.filler(self.decoder, None, plan.batches, plan.seed, plan.epoch, counters,
                             self.dataset.describe, self.on_error)
        batch = filler.fill(b, None, filler.prepare(b))
        return ClipPayload(batch.clips.numpy(), batch.facts, batch.samples,
                           tuple(counters.skipped_samples))

def start_pool(loader: Any, options: ClipOptions) -> WorkerPool | None:
    """The clip loader's workers, started (None without remote=)."""
    if options.remote is None:
        return None
    return WorkerPool(options.remote, ClipRecipe(type(loader), options, loader._data,
                                                 options.remote.threads))


def remote_filler(pool: WorkerPool | None, filler: ClipFiller, batch: Callable[..., Any]) -> Any:
    """The pass's filler: the local one, or the local one and the workers together;
    `batch` builds the queued batch (ClipBatch: clips, facts, samples, slot)."""
    if pool is None:
        return filler
    ring, counters = filler.ring, filler.counters

    def absorb(b: int, slot: int | None, payload: ClipPayload) -> Any:
        for where in payload.skipped:
            counters.add_skip(where)
        clips = payload.clips
        if slot is not None and ring is not None:
            out = ring.shaped(slot, clips.shape, clips.dtype)
            np.copyto(out, clips)
        else:
            out = clips.copy()  # the object store's copy is read-only, and not the user's
        return batch(torch.from_numpy(out), payload.facts.copy(), payload.samples.copy(), slot)

    plan = ClipPlan(filler.batches, filler.seed, filler.epoch, type(filler))
    return RemoteBatches(filler, absorb, pool, plan, range(len(filler.batches)))
