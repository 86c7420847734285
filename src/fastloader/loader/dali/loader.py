"""DaliLoader: FastLoader's semantics over a packed dataset, decoded and augmented by NVIDIA DALI.

Records go from the shards into DALI through a batch-mode external_source in the sampler's
order; crop boxes and flips come from fastloader.decode.augment's planner seeded by (seed, epoch,
batch, rank), exactly as in the native path, so batches, labels, len, set_epoch, sharding and
state_dict behave like FastLoader's and a resumed run continues bit-for-bit.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from fastloader.decode import coeffs
from fastloader.decode.augment import batch_rng, output_size, plan
from fastloader.errors import DecodeError, FastloaderError, InvalidArgumentError
from fastloader.format.manifest import Codec
from fastloader.format.open import dataset_from
from fastloader.gpu.ops import gpu_rng
from fastloader.loader.dali.pipeline import (
    GraphSpec,
    build_pipeline,
    feed_batch,
    import_dali,
    release_pipeline,
    run_pipeline,
    to_torch,
)
from fastloader.loader.dali.records import DaliRecords, FedBatch
from fastloader.loader.factory.arguments import options_from
from fastloader.loader.factory.attributes import PackedAttributes
from fastloader.loader.factory.base import FastLoader
from fastloader.loader.factory.options import DaliOptions, exif_turns
from fastloader.loader.factory.pass_dataset import PassDataset, collate_rows, unwrap_view
from fastloader.loader.factory.path_choice import PackedData
from fastloader.loader.order.passes import EpochPasses
from fastloader.loader.order.resume import dataset_identity
from fastloader.loader.order.sampler import EpochSampler
from fastloader.loader.pipeline.skips import SkipBudget
from fastloader.loader.pipeline.stats import Counters, LoaderStats, Timer

log = logging.getLogger(__name__)  # a child of the "fastloader" logger


class _WeakSource:
    """The external_source callback: refers to its loader weakly, so dropping the loader frees
    the pipeline (a strong reference would make a loader <-> pipeline cycle that lives on)."""

    def __init__(self, loader: DaliLoader) -> None:
        self._loader = weakref.ref(loader)

    def __call__(self) -> Any:
        loader = self._loader()
        if loader is None:
            raise StopIteration
        return loader._source()


class DaliLoader(EpochPasses, FastLoader, PackedAttributes, path="DALI loader"):
    """Iterate (images NCHW, labels int64) batches of a packed dataset through a DALI pipeline.

    Built by FastLoader(..., backend="dali"); the arguments mean what they mean for FastLoader.
    device "cuda[:k]" decodes with nvJPEG (DALI "mixed" operators) straight to that GPU; "cpu"
    (the default without CUDA) runs DALI's CPU operators with no CUDA context. gpu_transforms
    (fastloader.gpu.ops) run on the output batch on device, seeded by (seed, epoch, batch, rank).

    Args:
        data: a packed dataset folder or an open PackedDataset.
        batch_size: samples per batch, >= 1.
        shuffle: a new order each epoch.
        seed: the seed of the order and of the planned crops and flips.
        transforms: CPU transforms, planned by fastloader and decoded by DALI.
        normalize: (mean, std) as for FastLoader; None gives uint8.
        dtype: the floating output dtype with normalize.
        device: "cuda[:k]" or "cpu".
        num_threads: DALI's CPU threads (None or "auto": the cores of this rank).
        drop_last: drop each rank's last partial batch.
        rank: this process's rank.
        world_size: the number of ranks.
        prefetch: DALI's prefetch queue depth.
        gpu_transforms: fastloader.gpu ops run after decode on device.
        memory_format: torch.contiguous_format (default) or torch.channels_last output.
        roi_decode: decode only the planned box (False decodes whole images and slices: more
            work, but DALI's docs say ROI decoding turns the A100/H100 hardware decoder off).
        on_error: "raise" (a bad record raises DecodeError naming it) or "skip" (it is
            replaced by the next good record, counted in stats(), as the packed loader does).
        max_skips: on_error="skip"'s budget per pass, as for FastLoader.
        backend: only "dali".
        memory_budget: not used by DALI (must stay None).
        **dataloader_kwargs: refused (named in the error).

    Raises:
        OptionalDependencyError: NVIDIA DALI is not installed.
        InvalidArgumentError: an argument is out of range or not supported by DALI.
        InvalidTypeError: an argument has the wrong type.
        DecodeError: while iterating, DALI could not decode a record.
    """

    collate_fn = staticmethod(collate_rows)  # with `dataset`, as on the packed loader

    def __init__(self, data: PackedData, *args: object, **kwargs: object) -> None:
        # Every argument first (nothing is opened until all are good), then the dataset.
        options = options_from(DaliOptions, "DALI loader", args, kwargs)[0]
        import_dali()  # fail first, with the install command, when DALI is missing
        self.batch_size = options.batch_size
        self.prefetch = options.prefetch
        self.drop_last = options.drop_last
        self.transforms = options.decode_transforms
        self.device = options.target
        self.dtype = options.out_dtype
        self.memory_format = options.layout
        self._torch_normalizes = options.torch_normalizes
        self._gpu_ops = options.dali_ops
        self._threads = options.threads
        self.on_error = options.on_error
        self.max_skips = options.max_skips
        self._data, self._owns_dataset = dataset_from(
            unwrap_view(data), "a packed dataset path or a PackedDataset")
        try:  # what needs the dataset; a failure closes a dataset this loader opened
            if (np.asarray(self._data.codecs) == Codec.COEFFS).any():
                raise InvalidArgumentError(coeffs.refusal('backend="dali"'))
            # DALI decodes as stored: refused for a dataset packed to be turned, unless False
            exif_turns(options.apply_exif_orientation, self._data, "DALI loader")
            # the distinct shapes come with the index's stamp (no scan of every row); an
            # oriented pack's stored sizes are computed at open
            self.image_size = output_size(self.transforms, self._data.distinct_shapes
                                          if self._data.orientations is None
                                          else self._data.stored_shapes)
            self.sampler = EpochSampler.for_loader(len(self._data), options.seed, options.rank,
                                                   options.world_size, options.shuffle,
                                                   self.drop_last)
            self.sampler.dataset_id = dataset_identity(self._data)  # a checkpoint matches it
        except BaseException:
            if self._owns_dataset:
                self._data.close()
            raise
        self.dataset = PassDataset(self, self._data)  # DataLoader's `dataset`, as packed
        self._spec = self._graph_spec(None if self._torch_normalizes else options.constants,
                                      options.roi_decode)
        self._pipe: Any = None
        self._feed: Iterator[Any] = iter(())
        self._records = DaliRecords(self._data, self.transforms, self.on_error)
        self._in_flight: list[FedBatch] = []  # batches handed to DALI, oldest first
        self._refusal: DecodeError | None = None  # the header refusal that ended the feed
        self._pass: tuple[np.ndarray, int, int] = (np.zeros(0, np.int64), 0, 0)
        self._budget = SkipBudget(None, 0)
        self._held: Any = None  # the last batch's DALI outputs (see _next_batch)
        self._needs_drain = False  # a pass started since the pipeline's last reset
        self._counters = Counters()
        self._active: object | None = None  # token of the pass now iterating
        self._resume_batch = 0
        self._batches_done = 0
        self._built()

    def _graph_spec(self, constants: tuple[np.ndarray, np.ndarray] | None,
                    roi_decode: bool) -> GraphSpec:
        # resolve_device fixed the CUDA index (LOCAL_RANK under torchrun): one device for all.
        device_id = self.device.index if self.device.type == "cuda" else None
        mean, std = constants if constants is not None else (None, None)
        if mean is None and self._dali_dtype != torch.uint8:  # float, no normalize: x / 255
            mean, std = np.zeros(3), np.full(3, 255.0)
        return GraphSpec(
            batch_size=self.batch_size, num_threads=self._threads, device_id=device_id,
            prefetch=self.prefetch, out_size=self.image_size,
            mean=None if mean is None else (float(mean[0]), float(mean[1]), float(mean[2])),
            std=None if std is None else (float(std[0]), float(std[1]), float(std[2])),
            dali_float16=self._dali_dtype == torch.float16, seed=self.sampler.seed,
            roi_decode=roi_decode,
            channels_last=self.memory_format == torch.channels_last)

    @property
    def _dali_dtype(self) -> torch.dtype:
        if self._torch_normalizes:
            return torch.uint8
        if self.dtype in (torch.uint8, torch.float16):
            return self.dtype
        return torch.float32  # DALI's float output; other float dtypes convert on the device

    # -- the external_source feed ------------------------------------------------------------

    def _source(self) -> Any:
        """Called by DALI for the next batch; StopIteration ends the pass."""
        item = next(self._feed)  # StopIteration propagates to DALI: end of this pass
        self._in_flight.append(item[0])
        return item[1]

    def _planned_batches(self, indices: np.ndarray, epoch: int, start: int,
                         stop: int) -> Iterator[Any]:
        first = self.sampler.pass_layout(epoch)[1]  # indices begin at that batch's samples
        for b in range(start, stop):
            samples = indices[(b - first) * self.batch_size : (b - first + 1) * self.batch_size]
            with Timer(self._counters, "plan"):
                rng = batch_rng(self.sampler.seed, epoch, b, self.sampler.rank)
                crops, flips, _ = plan(self.transforms, self._data.stored_shapes[samples], rng)
            with Timer(self._counters, "read"):
                try:
                    fed = self._records.batch(b, samples, crops, flips,
                                              (self.sampler.seed, epoch, self.sampler.rank))
                except DecodeError as exc:  # raised when batch b is due, after those before it
                    self._refusal = exc
                    return
                batch = feed_batch(fed.records, fed.crops, fed.flips,
                                   self._data.labels[fed.samples])
            yield fed, batch

    # -- iteration --------------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._closed:
            raise FastloaderError("this DaliLoader was closed; create a new one to iterate")
        self._end_pass()  # one pass at a time: a new iter() ends the previous one
        start = self._resume_batch  # spent by the pass's first batch (_first_batch_out)
        epoch = self.sampler.begin_pass()  # rank/world of now; a cut-short pass moves on
        stop = self._pass_end()
        indices = self.sampler.indices()
        self._pass = (indices, epoch, stop)
        self._budget = SkipBudget(self.max_skips, len(indices))
        self._start_feed(start)
        token = object()
        self._active = token
        self._batches_done = start
        return self._consume(token, epoch, start, stop)

    def _start_feed(self, b: int) -> None:
        """Feed DALI the current pass from batch b on (a fresh pipeline if the last failed)."""
        indices, epoch, stop = self._pass
        self._feed = self._planned_batches(indices, epoch, b, stop)
        self._in_flight = []
        self._refusal = None
        if self._pipe is None:
            self._pipe = build_pipeline(self._spec, _WeakSource(self))
        self._needs_drain = True

    def _consume(self, token: object, epoch: int, start: int,
                 stop: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        finished = False
        started = time.perf_counter()
        try:
            for b in range(start, stop):
                if self._active is not token:
                    raise FastloaderError("this iterator was ended because a newer pass over "
                                          "the same DaliLoader started (or it was closed)")
                images, labels = self._next_batch(epoch, b)
                self._batches_done = b + 1
                if b == start:  # until now an iter() restarts this pass
                    self._first_batch_out()
                yield images, labels
            finished = True
        finally:
            self._counters.add_time("active", time.perf_counter() - started)
            if self._active is token:
                self._end_pass()
            if finished:
                self._pass_finished(epoch)

    def _run(self, b: int) -> Any:
        """Batch b's DALI outputs. When DALI fails, the records it failed on are found and
        remembered, and the pass is re-fed from batch b: a remembered record then raises when
        its batch is due (after the batches before it), or is replaced under on_error="skip"."""
        while True:
            try:
                with Timer(self._counters, "wait"):  # DALI decodes ahead: the time behind
                    return run_pipeline(self._pipe, self.device)
            except StopIteration:
                if self._refusal is not None:
                    raise self._refusal from None
                raise FastloaderError(f"DALI ended the pass early, before batch {b}") from None
            except RuntimeError as exc:
                self._drop_pipeline()  # DALI marks a pipeline that failed as unusable
                if not self._records.find_refused(self._in_flight):
                    raise self._decode_error(exc) from exc
                self._start_feed(b)

    def _next_batch(self, epoch: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = self._run(b)
        for description, why in self._in_flight.pop(0).skipped:
            self._counters.add_skip(description)
            log.warning("on_error='skip': %s (batch %d) replaced: %s", description, b, why)
            self._budget.spend(description)
        with Timer(self._counters, "copy"):
            out_dtype = self._dali_dtype if self._torch_normalizes else self.dtype
            images, labels = to_torch(outputs, self.device, self._dali_dtype, out_dtype)
            # On CUDA the copy out of DALI's buffers is only enqueued: keep them alive until
            # the next batch, whose work on the same stream comes after it.
            self._held = outputs
            if self._gpu_ops.transforms:
                rng = gpu_rng(self.sampler.seed, epoch, b, self.sampler.rank)
                images, labels = self._gpu_ops(images, labels, rng)
        self._counters.add_batch(int(images.shape[0]))
        return images, labels

    def _decode_error(self, exc: RuntimeError) -> FastloaderError:
        """DALI failed, yet each record in flight decodes alone: name the batches in flight."""
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        batches = ", ".join(str(fed.b) for fed in self._in_flight) or "none"
        return FastloaderError(f"the DALI pipeline failed ({first_line}) on batches "
                               f"{batches}, though each of their records decodes on its own")

    def _end_pass(self) -> None:
        """Stop feeding, drain what DALI already prefetched, and reset it for the next pass."""
        self._active = None
        self._feed = iter(())
        pipe = self._pipe
        if pipe is None or not self._needs_drain:
            return
        self._needs_drain = False
        try:
            while True:  # at most `prefetch` batches are in flight
                pipe.run()
        except StopIteration:
            pipe.reset()
        except RuntimeError:
            self._drop_pipeline()  # a failing prefetched batch: build a fresh one next time
        self._in_flight = []

    def _drop_pipeline(self) -> None:
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            release_pipeline(pipe)

    def _end_active_pass(self) -> None:
        self._end_pass()

    def stats(self) -> LoaderStats:
        """Live counters in FastLoader's layout; decode time is inside DALI (wait_s shows it
        when DALI is behind), read_s/plan_s are the external_source feed's own cost."""
        return self._counters.snapshot(
            queue_depth=len(self._in_flight), prefetch=self.prefetch, ring_slots=0,
            ring_bytes=0, pinned=False, num_threads=self._threads,
            backend="dali-mixed" if self.device.type == "cuda" else "dali-cpu")

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        """Drain and free the DALI pipeline; close the dataset when this loader opened it."""
        if self._closed:
            return
        self._closed = True
        self._end_pass()
        self._drop_pipeline()
        if self._owns_dataset:
            self._data.close()

    def __repr__(self) -> str:
        if not hasattr(self, "sampler"):
            return "DaliLoader(<not built>)"
        return (f"DaliLoader({str(self._data.root)!r}, batch_size={self.batch_size}, "
                f"image_size={self.image_size}, device={self.device}, "
                f"num_threads={self._threads}, prefetch={self.prefetch}, {self.sampler!r})")
