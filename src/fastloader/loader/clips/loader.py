"""ClipLoader: the loader of a packed dataset whose records are timed clips (audio, video):
each loader of them (loader/clips/audio.py, loader/clips/video.py) is this loader with its
kind's ClipDecoder, and its batches are made by the one producer (loader/pipeline/producer.py)
with ClipBatches.

The producer runs `prefetch` batches ahead over the pass's batch plan
(loader/order/duration_batches.py: fixed counts, or by duration with max_batch_seconds); per batch
the decoder's threads read each clip's bytes zero-copy from the shard, decode only its window and
write it into the batch buffer: a slot of the page-locked ring (loader/pipeline/memory.BatchRing)
on CUDA, copied non_blocking on a side stream (the slot is reused only after the copy's event), or
a fresh array on the CPU. The other fields come from the collator the packed loader uses
(loader/images/collate.py). Each batch's clips are the pair (clips, per-clip facts) where the
records' image would be: audio's (waveforms [B, C, T], lengths [B]), video's (frames, timestamps).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from fastloader.errors import DecodeError, FastloaderError, invalid_argument
from fastloader.format.kinds import EncodedImage, Kind, loaded_by
from fastloader.format.open import dataset_from
from fastloader.loader.clips.decoding import ClipDecoder
from fastloader.loader.clips.remote_clips import remote_filler, start_pool
from fastloader.loader.factory.arguments import options_from
from fastloader.loader.factory.attributes import PackedAttributes
from fastloader.loader.factory.base import FastLoader
from fastloader.loader.factory.options import ClipOptions
from fastloader.loader.factory.path_choice import PackedData
from fastloader.loader.factory.paths import PATHS
from fastloader.loader.images.collate import FieldCollator
from fastloader.loader.order.duration_batches import BatchPlan
from fastloader.loader.order.passes import EpochPasses, ended_pass
from fastloader.loader.order.resume import dataset_identity
from fastloader.loader.order.sampler import EpochSampler
from fastloader.loader.pipeline.memory import BatchRing
from fastloader.loader.pipeline.producer import Producer
from fastloader.loader.pipeline.skips import RAISE_FIX
from fastloader.loader.pipeline.stats import Counters, LoaderStats, Timer


class ClipLoader(EpochPasses, PackedAttributes, FastLoader):
    """The loader of a packed dataset of timed clips; subclasses give `_decoder_for`.

    Args (every clip loader's; each loader adds its own):
        data: a packed dataset whose records are this loader's kind, path or PackedDataset.
        batch_size: clips per batch.
        shuffle: a new order each epoch, drawn from (seed, epoch).
        seed: the seed of the order and of each clip's window and crop.
        device: "cuda", "cuda:k" or "cpu"; default this process's CUDA device if any.
        num_threads: decode threads ("auto"/None: the cores this rank may use).
        prefetch: batches decoded ahead.
        drop_last: drop the last short batch, and the batches that would make ranks uneven.
        rank: this process's rank (default from torch.distributed).
        world_size: the number of ranks (default likewise).
        on_error: "raise" or "skip" (a clip that does not decode is replaced by the next).
        verify_records: check each clip's crc32 as it is read.
        fields: the field names each batch holds, as a tuple in that order (see FastLoader).

    Raises:
        InvalidArgumentError: an argument is out of range, or the dataset holds no such clips.
        DecodeError: while iterating, a clip does not decode (on_error="raise").
    """

    kind_words = "clips"
    kind_class: type[Kind] = Kind  # the records kind this loader reads
    _path = "clip loader"  # each subclass's is its own (class AudioLoader(..., path=...))
    options_class: ClassVar[type[ClipOptions]] = ClipOptions

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls._path in PATHS:  # its path's options class, declared once in factory/paths.py
            options = PATHS[cls._path].options
            assert issubclass(options, ClipOptions), options
            cls.options_class = options

    def __init__(self, data: PackedData, *args: object, **kwargs: object) -> None:
        options = options_from(self.options_class, self._path, args, kwargs)[0]
        self.batch_size, self.drop_last = options.batch_size, options.drop_last
        self.device, self.on_error = options.target, options.on_error
        self._prefetch, self._counters = options.depth, Counters()
        self._data, self._owns_dataset = dataset_from(
            data, f"a packed dataset of {self.kind_words} (path or PackedDataset)")
        with contextlib.ExitStack() as undo:
            if self._owns_dataset:
                undo.callback(self._data.close)
            self._open(options, undo)
            undo.pop_all()
        self._built()

    def _decoder_for(self, options: ClipOptions, meta: np.ndarray) -> ClipDecoder:
        """This kind's batch decoder over the records' (N, len(meta)) meta column."""
        raise NotImplementedError

    def _refusal(self, kind: Kind) -> tuple[str, str] | None:
        """Why the records' kind is not this loader's, and the fix (None: it is)."""
        if isinstance(kind, self.kind_class):
            return None
        argument = f"{self._path.split()[0]}="
        if isinstance(kind, EncodedImage):
            return (f"holds images, not {self.kind_words}",
                    f"Drop {argument} to load its images with the packed loader.")
        values, loader = loaded_by(kind, "the loader they take")
        return f"holds {values}, not {self.kind_words}", f"Pass {loader} instead of {argument}."

    def _open(self, options: ClipOptions, undo: contextlib.ExitStack) -> None:
        ds = self._data
        problem = self._refusal(ds.fields[ds.image_field].kind)
        if problem is not None:
            raise invalid_argument("data", str(ds.root), problem[0], problem[1])
        if options.verify_records or self._owns_dataset:
            ds.verify_records = options.verify_records
        assert ds.columns is not None  # a records kind with meta lives in a v2 dataset
        self._meta: np.ndarray = ds.columns.meta(ds.image_field)
        self.sampler = EpochSampler.for_loader(len(ds), options.seed, options.rank,
                                               options.world_size, options.shuffle,
                                               options.drop_last)
        self._decoder = self._decoder_for(options, self._meta)
        undo.callback(self._decoder.close)
        max_seconds, buckets = options.plan_limits()
        self._plan = BatchPlan(self._decoder.durations(), options.seed, options.shuffle,
                               options.batch_size, max_seconds, buckets, options.drop_last)
        self._collate = FieldCollator(ds, options.fields, None)
        self._ring: BatchRing | None = None
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._active: ClipProducer | None = None
        self._resume_batch = 0  # where the next pass starts (BatchPlan.rank_batches' start)
        self._batches_done = 0
        self.dataset = ds
        self._identity = dataset_identity(ds)  # the manifest's hash: fixed while open
        self._dispatch: Any = None  # remote=: the pass's filler, which cancels what is queued
        self.remote = start_pool(self, options)  # remote=: the loader's Ray workers, or None
        if self.remote is not None:
            undo.callback(self.remote.close)

    # -- the pass -------------------------------------------------------------------------

    def _rank_batches(self, epoch: int) -> list[np.ndarray]:
        return self._plan.rank_batches(epoch, self.sampler.rank, self.sampler.world_size,
                                       self._resume_batch)

    def __len__(self) -> int:
        self.sampler.refresh()
        if self._active is not None:  # the running pass's epoch, whole
            return len(self._plan.rank_batches(self._epoch, self.sampler.rank,
                                               self.sampler.world_size))
        return len(self._rank_batches(self.sampler.next_epoch()))

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise FastloaderError("the loader is closed; build a new one")
        self._stop_pass()
        epoch = self.sampler.begin_pass()
        batches = self._rank_batches(epoch)
        self._global_start = self._resume_batch  # spent at the first batch (_first_batch_out)
        self._batches_done = 0
        self._epoch = epoch
        self._ensure_ring(batches)
        local = ClipBatches(self._decoder, self._ring, batches, self._plan.seed, epoch,
                            self._counters, self._data.describe, self.on_error)
        filler = self._dispatch = remote_filler(self.remote, local, ClipBatch)
        producer = Producer(filler, self._ring, self._counters, range(len(batches)),
                            depth=self._prefetch)
        if filler is not local:
            filler.watch(producer.stop_event)
        self._active = producer.start()
        return self._consume(producer, epoch)

    def _consume(self, producer: ClipProducer, epoch: int) -> Iterator[Any]:
        finished = False
        try:
            with Timer(self._counters, "active"):
                while True:
                    if self._active is not producer:
                        raise ended_pass()
                    batch = producer.get(self._counters)
                    if batch is None:
                        finished = True
                        return
                    entry = self._hand_over(batch)
                    if self._batches_done == 0:
                        self._first_batch_out()
                    self._batches_done += 1
                    self._counters.add_batch(batch.count)
                    yield entry
        finally:
            if self._active is producer:
                self._stop_pass()
            if finished:
                self._pass_finished(epoch)

    def _hand_over(self, batch: ClipBatch) -> Any:
        """The batch on the device, its clips entry finished and the other fields collated."""
        clips, slot = batch.clips, batch.slot
        with Timer(self._counters, "copy"):
            if slot is not None and self._stream is not None and self._ring is not None:
                current = torch.cuda.current_stream(self.device)
                self._stream.wait_stream(current)
                with torch.cuda.stream(self._stream):
                    moved = clips.to(self.device, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record(self._stream)
                current.wait_stream(self._stream)
                moved.record_stream(current)
                self._ring.release(slot, event)
                clips = moved
            else:
                clips = clips.to(self.device)
        facts = torch.from_numpy(batch.facts).to(self.device)
        entry = self._decoder.finish(clips, facts, slot is not None)
        labels = torch.from_numpy(np.asarray(self._data.labels[batch.samples], np.int64))
        return self._collate(entry, labels.to(self.device), batch.samples)

    def _ensure_ring(self, batches: list[np.ndarray]) -> None:
        """A page-locked ring whose slots hold this pass's largest batch (CUDA only)."""
        if self._stream is None or not batches:
            return
        size = self._decoder.dtype.itemsize
        need = max(math.prod(self._decoder.shape(b)) * size for b in batches)
        if self._ring is None or need > self._ring.slot_nbytes:
            self._ring = BatchRing.of_bytes(self._prefetch + 1, need, pin=True)

    def _stop_pass(self) -> None:
        producer, self._active = self._active, None
        if producer is not None:
            producer.shutdown()
            if self._ring is not None:  # the queued batches' and a cut-short put's slots
                self._ring.reset()
        if hasattr(self._dispatch, "cancel"):
            self._dispatch.cancel()

    def _end_active_pass(self) -> None:
        self._stop_pass()

    def state_dict(self) -> dict[str, Any]:
        """A global checkpoint (loader/order/resume.py's rule): `position` the samples of the
        epoch's order delivered on all ranks; `pass_start` where the next pass resumes (that sample
        position with fixed counts, `global_batches_done` by duration)."""
        # every rank takes one global batch per step (duration_batches.deal)
        self.sampler.refresh()
        if self._active is not None:
            epoch, done, start = self._epoch, self._batches_done, self._global_start
        else:
            epoch, done, start = self.sampler.next_epoch(), 0, self._resume_batch
        resume, position = self._plan.after(epoch, start, done * self.sampler.world_size)
        return {"version": 2, "epoch": epoch, "batches_done": done,
                "pass_start": resume, "position": position,
                "global_batches_done": None if self._plan.by_samples else resume,
                **self._settings(), "rank": self.sampler.rank,
                "world_size": self.sampler.world_size}

    def _settings(self) -> dict[str, Any]:
        """The state's fields that fix the epoch's batches (load_state_dict compares them)."""
        return {"kind": self._decoder.kind, "dataset": self._identity, "seed": self._plan.seed,
                "num_samples": len(self._data), "batch_size": self.batch_size,
                "max_batch_seconds": self._plan.max_seconds,
                "buckets": len(self._plan.edges) + 1, "shuffle": self._plan.shuffle,
                "drop_last": self.drop_last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next pass yields what is left of the saved epoch, on any world size
        (the new ranks share it, strided); with fixed counts on any batch size or drop_last
        too (the rest of the order cut anew). A version-1 state resumes on its batch size."""
        if not isinstance(state, dict):
            raise invalid_argument("state", type(state).__name__, "is not a dict",
                                   "Pass a dict from the loader's state_dict().")
        mine = self._settings()
        version = state.get("version")
        same = ["kind", "seed", "num_samples", "max_batch_seconds", "buckets", "shuffle"]
        same += ["batch_size", "drop_last"] if version == 1 else ["dataset"]
        if version not in (1, 2):
            raise invalid_argument("state['version']", version, "this loader reads 1 and 2",
                                   "Pass a dict from the loader's state_dict().")
        for key in same:
            if state.get(key) != mine[key]:
                raise invalid_argument(f"state[{key!r}]", state.get(key),
                                       f"this loader has {key}={mine[key]!r}, and the epoch's "
                                       "batches depend on it", "Resume with a loader over the "
                                       "same dataset with the same seed, shuffle and duration "
                                       "settings (world size may change).")
        self._stop_pass()
        self.sampler.set_epoch(int(state["epoch"]))
        if version == 1:  # global batches taken, of this batch size
            taken = int(state["global_batches_done"])
            self._resume_batch = self._plan.after(int(state["epoch"]), 0, taken)[0]
        else:
            self._resume_batch = int(state["pass_start"])

    def stats(self) -> LoaderStats:
        depth = self._active.queue_depth() if self._active is not None else 0
        ring = self._ring
        return self._counters.snapshot(
            queue_depth=depth, prefetch=self._prefetch,
            ring_slots=ring.slots if ring is not None else 0,
            ring_bytes=ring.nbytes if ring is not None else 0,
            pinned=ring is not None, num_threads=self._decoder.threads,
            backend=self._decoder.backend,
            remote_workers=self.remote.stats() if self.remote is not None else ())

    def _after_fork_in_child(self) -> None:
        self._active = None  # the parent's producer thread is not in the child
        self.remote = None  # nor its Ray connection and actors
        self._decoder.after_fork()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_pass()
        self._decoder.close()
        pool = getattr(self, "remote", None)
        if pool is not None:
            pool.close()
        self._ring = None
        if self._owns_dataset:
            self._data.close()




@dataclass(frozen=True)
class ClipBatch:
    """A batch of clips as the producer queues it: the buffer (a ring slot's view on CUDA,
    else its own array, cut to what its clips fill), the per-clip facts, the samples
    delivered (after any skip replacement) and the slot."""

    clips: torch.Tensor
    facts: np.ndarray
    samples: np.ndarray
    slot: int | None

    @property
    def count(self) -> int:
        return len(self.samples)


class ClipBatches:
    """The batches of one pass of a clip loader, for the producer: each batch's clips decoded
    by the kind's ClipDecoder into a ring slot (CUDA) or a fresh array (CPU).

    Nothing is read ahead: the decoder's threads read each clip's bytes as they decode it, so
    `prepare` only hands over the batch's indices."""

    read_ahead = False

    def __init__(self, decoder: ClipDecoder, ring: BatchRing | None, batches: list[np.ndarray],
                 seed: int, epoch: int, counters: Counters, describe: Callable[[int], str],
                 on_error: str) -> None:
        self.decoder, self.ring, self.batches = decoder, ring, batches
        self.seed, self.epoch, self.counters = seed, epoch, counters
        self.describe, self.on_error = describe, on_error

    def prepare(self, b: int) -> np.ndarray:
        return self.batches[b]

    def fill(self, b: int, slot: int | None, indices: np.ndarray) -> ClipBatch:
        """Batch b's clips into the slot (None: a fresh array); a clip that does not decode
        is raised naming it, or (on_error="skip") replaced by the decoder."""
        decoder = self.decoder
        shape = decoder.shape(indices)
        if slot is not None and self.ring is not None:
            out = self.ring.shaped(slot, shape, decoder.dtype)
        else:
            out = np.empty(shape, decoder.dtype)
        with Timer(self.counters, "decode"):
            facts, failures = decoder.decode_into(indices, self.seed, self.epoch, out)
        if failures:  # replacements change the batch's samples, not the pass's plan
            indices = indices.copy()
        for failure in failures:
            where = f"sample {failure.sample} ({self.describe(failure.sample)})"
            if self.on_error != "skip":
                raise DecodeError(f"batch {b}: {failure.named(where)}. {RAISE_FIX}")
            index, facts[failure.row] = decoder.replace(failure, self.seed, self.epoch, out)
            indices[failure.row] = index
            self.counters.add_skip(where)
        if slot is None:
            # cut here, in numpy (torch's intra-op pool may be unusable in a forked child)
            out = decoder.trimmed(out, facts)
        return ClipBatch(torch.from_numpy(out), facts, indices, slot)


ClipProducer = Producer[Any, ClipBatch]  # np.ndarray, or remote=' tickets
