"""PackedLoader: FastLoader over a packed dataset, decoded by the native pipeline (or Pillow)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import torch

from fastloader.checks import flag, positive_int
from fastloader.decode.augment import check_transforms, output_size
from fastloader.decode.boxes import DEFAULT_MIN_BOX_VISIBILITY, check_min_visibility
from fastloader.decode.decode import BatchDecoder
from fastloader.errors import FastloaderError, InvalidArgumentError, invalid_argument
from fastloader.format.dataset import dataset_from
from fastloader.gpu.device import DeviceStep, normalize_constants, resolve_device, resolve_dtype
from fastloader.gpu.ops import device_ops, gpu_rng
from fastloader.loader.autotune import make_tuner
from fastloader.loader.batch_transform import check_batch_transform
from fastloader.loader.collate import FieldCollator
from fastloader.loader.detection import letterboxed, plan_boxes_field
from fastloader.loader.extra_images import ExtraImages
from fastloader.loader.loader import (
    BACKENDS,
    FastLoader,
    PackedAttributes,
    parameter_names,
    refuse_dataloader_kwargs,
)
from fastloader.loader.masks import MaskBatches
from fastloader.loader.memory import BatchRing, pinned_nbytes
from fastloader.loader.pass_dataset import PassDataset, collate_rows, unwrap_view
from fastloader.loader.passes import EpochPasses
from fastloader.loader.pipeline import EpochPlan, Producer
from fastloader.loader.remote import DEFAULT_PREFETCH_SHARDS, plan_shards, remote_options
from fastloader.loader.sampler import EpochSampler, planned_world, threads_per_rank
from fastloader.loader.skips import check_max_skips
from fastloader.loader.stats import Counters, LoaderStats

MAX_THREADS = 1024  # far above any core count; more only fails in pthread_create


def _check_sizes(num_threads: Any, batch_size: int, image_size: tuple[int, int],
                 slot_bytes: int) -> None:
    """Refuse at construction what could only fail later, at the first batch."""
    if isinstance(num_threads, int) and num_threads > MAX_THREADS:
        raise invalid_argument("num_threads", num_threads, f"must be at most {MAX_THREADS}",
                               "Pass 'auto' or about the number of cores.")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 2 * slot_bytes > memory:  # the ring holds at least two batches
        raise invalid_argument(
            "batch_size", batch_size, f"two batches of {batch_size} x {image_size[0]} x "
            f"{image_size[1]} x 3 bytes ({2 * slot_bytes / 2**30:.1f} GiB) exceed this "
            f"machine's {memory / 2**30:.1f} GiB of memory",
            "Lower batch_size or the output size of transforms.")


class PackedLoader(EpochPasses, FastLoader, PackedAttributes):
    """FastLoader over a packed dataset: the native (or Pillow) decode pipeline.

    Built by FastLoader(path_or_packed_dataset, ...); see FastLoader for the arguments.
    `dataset` is its passes as an IterableDataset of samples and `collate_fn` turns a batch's
    samples back into that batch, so a DataLoader rebuilt from these attributes (Accelerate's
    skip_first_batches) yields this loader's batches; `dataset.packed` is the PackedDataset.
    """

    collate_fn = staticmethod(collate_rows)

    def __init__(
        self,
        data: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        *,
        seed: int = 0,
        transforms: Any = None,
        normalize: Any = None,
        dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
        num_threads: int | str | None = "auto",
        prefetch: int | str = 2,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        on_error: str = "raise",
        max_skips: int | float | None = None,
        backend: str = "auto",
        memory_budget: int | None = None,
        gpu_transforms: Any = None,
        memory_format: torch.memory_format | None = None,
        sampler: Any = None,
        batch_transform: Any = None,
        verify_records: bool = False,
        fields: Any = None,
        multi_hot: Any = None,
        padded: bool = False,
        min_box_visibility: float = DEFAULT_MIN_BOX_VISIBILITY,
        decode_images: bool = True,
        cache_dir: Any = None,
        cache_limit: int | str | None = None,
        storage_options: dict[str, Any] | None = None,
        shuffle_window: int | None = None,
        prefetch_shards: int = DEFAULT_PREFETCH_SHARDS,
        **dataloader_kwargs: Any,
    ) -> None:
        self._closed = True  # until fully built, so __del__/close are safe on a failed init
        refuse_dataloader_kwargs(dataloader_kwargs, "packed path",
                                 parameter_names(PackedLoader.__init__))
        self.max_skips = check_max_skips(max_skips, on_error)  # on_error="skip"'s budget
        verify = flag("verify_records", verify_records)  # crc32 of each record as it is read
        if backend not in BACKENDS or backend == "dali":
            raise invalid_argument("backend", backend, "is not a backend of the packed loader",
                                   "Pass 'auto', 'native' or 'pillow' (FastLoader(..., "
                                   "backend='dali') builds the DALI loader).")
        self._init_device(device, normalize, dtype, gpu_transforms, memory_format)
        self.batch_transform = check_batch_transform(batch_transform)
        self._remote = remote_options(data, cache_dir, cache_limit, storage_options,
                                      shuffle_window, prefetch_shards, sampler)
        self._init_packed(data, batch_size, shuffle, seed, transforms, drop_last, rank,
                          world_size, on_error, backend, sampler)
        # On the dataset, which reads the records (the producer's reads go through it). Off by
        # default: it costs ~3% of the loader's CPU on ImageNet-sized records (README).
        if verify or self._owns_dataset:  # a caller's dataset keeps its own choice otherwise
            self._data.verify_records = verify
        try:  # what each batch holds: (images, labels), a tuple of fields= or a dict
            extra = [n for n, s in self._data.fields.items()
                     if s.kind == "image" and n != self._data.image_field]
            self._extra_images = (ExtraImages(self.transforms, backend)
                                  if extra and flag("decode_images", decode_images) else None)
            self._collate = FieldCollator(self._data, fields, multi_hot,
                                          flag("padded", padded), self._extra_images,
                                          check_min_visibility(min_box_visibility),
                                          letterboxed(self.transforms))
            self._box_field = plan_boxes_field(self._data, self.transforms)
            if self._gpu_ops is not None and self._collate.box_fields:
                raise InvalidArgumentError(
                    "gpu_transforms= with boxes fields is not supported: the device ops move "
                    "pixels after the boxes were mapped. Use the CPU transforms= (fused crop, "
                    "resize and flip), which move boxes with the pixels.")
            self._masks = self._mask_batches()
        except BaseException:
            self.close()
            raise
        self._init_tuning(num_threads, prefetch, memory_budget)

    def _mask_batches(self) -> MaskBatches | None:
        """The builder of the mask fields this loader yields (None: it yields none)."""
        names = self._collate.mask_fields
        if not names:
            return None
        if self._gpu_ops is not None:
            raise InvalidArgumentError(
                "gpu_transforms= with mask fields is not supported: the device ops move pixels "
                "after the masks were cropped. Use the CPU transforms= (fused crop, resize and "
                "flip), which move masks with the pixels.")
        return MaskBatches(self._data, names, pin=self.device.type == "cuda")

    def _init_device(self, device: Any, normalize: Any, dtype: Any, gpu_transforms: Any,
                     memory_format: Any) -> None:
        """The copy step, and the gpu_transforms run after it on uint8 pixels, normalize last."""
        self.device = resolve_device(device, default_cuda=True)
        constants = normalize_constants(normalize)
        self._gpu_ops = device_ops(gpu_transforms, constants,
                                   resolve_dtype(dtype, constants is not None), memory_format)
        if self._gpu_ops is not None and constants is not None:
            # The ops normalize, last: the copy step only moves uint8 pixels.
            self._step = DeviceStep(self.device, None, torch.uint8, memory_format)
        else:
            self._step = DeviceStep(self.device, normalize, dtype, memory_format)

    def _init_packed(self, data: Any, batch_size: int, shuffle: bool, seed: int,
                     transforms: Any, drop_last: bool, rank: int | None,
                     world_size: int | None, on_error: str,
                     backend: str, source: Any) -> None:
        self.batch_size = positive_int("batch_size", batch_size)
        self.drop_last = flag("drop_last", drop_last)
        if on_error not in ("raise", "skip"):
            raise invalid_argument("on_error", on_error, "must be 'raise' or 'skip'",
                                   "Pass on_error='skip' to replace undecodable samples.")
        self.on_error = on_error
        self.transforms = check_transforms(transforms)
        self._max_threads = threads_per_rank(planned_world(rank, world_size))
        self._data, self._owns_dataset = dataset_from(
            unwrap_view(data),
            "a packed dataset path or URL, a PackedDataset or a map-style torch Dataset",
            **self._remote.open_options)
        try:
            self.image_size = output_size(self.transforms, self._data.shapes)
            self.sampler = EpochSampler.for_loader(len(self._data), seed, rank, world_size,
                                                   flag("shuffle", shuffle), self.drop_last,
                                                   source)
            self.sampler.shard_layout = self._remote.layout(self._data)
            self._decoder = BatchDecoder(1, backend)  # _init_tuning sets its thread count
            # DataLoader's `dataset`: this loader's passes as samples (loader/pass_dataset.py).
            self.dataset = PassDataset(self, self._data)
        except BaseException:
            if self._owns_dataset:
                self._data.close()
            raise
        self._ring: BatchRing | None = None
        self._active: Producer | None = None
        self._resume_batch = 0
        self._batches_done = 0
        self._counters = Counters()
        self._closed = False

    def _init_tuning(self, num_threads: Any, prefetch: Any, memory_budget: Any) -> None:
        """num_threads / prefetch: fixed ints or "auto" (tuned online: fastloader.loader.autotune).

        num_threads=None means a fixed count: the cores this rank may use.
        """
        height, width = self.image_size
        slot_bytes = pinned_nbytes(self.batch_size * height * width * 3)  # what a slot pins
        try:
            _check_sizes(num_threads, self.batch_size, self.image_size, slot_bytes)
            self._tuner = make_tuner(self._max_threads if num_threads is None else num_threads,
                                     prefetch, memory_budget, self._max_threads, slot_bytes)
            self._decoder.num_threads = self._tuner.setting().threads
        except BaseException:
            self.close()
            raise

    # -- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise FastloaderError("this FastLoader was closed; create a new one to iterate")
        self._stop_active()  # one pass at a time: a new iter() ends the previous one
        if self._ring is None:
            height, width = self.image_size
            # A pinned ring takes every slot prefetch="auto" may reach now, before training.
            capacity = self._tuner.max_prefetch + 1 if self._tuner.tunes_prefetch else None
            self._ring = BatchRing(self.prefetch + 1, self.batch_size, height, width,
                                   pin=self.device.type == "cuda", capacity=capacity)
        start, self._resume_batch = self._resume_batch, 0
        epoch = self.sampler.begin_pass()  # rank/world of now; a cut-short pass moves on
        epoch_plan = EpochPlan(self.sampler.indices(), self.batch_size, len(self), start,
                               epoch, self.sampler.seed, self.sampler.rank)
        plan_shards(self._data, epoch_plan.indices, start, len(self), self.batch_size)
        # The tuner may have settled on the last batch of a pass, after the producer's last
        # chance to apply it: take its setting here so a settled count is never left unapplied.
        self._decoder.num_threads = self._tuner.setting().threads
        tuner = self._tuner if self._tuner.state == "measuring" else None
        producer = Producer(self._data, self.transforms, self._decoder, self._ring,
                            self._counters, self.on_error, epoch_plan, tuner,
                            self._step.planar, self.max_skips, self.batch_transform,
                            self._box_field, self._masks).start()
        self._active = producer
        self._batches_done = start
        return self._consume(producer, epoch_plan)

    def _consume(self, producer: Producer, epoch_plan: EpochPlan) -> Iterator[Any]:
        clock = time.perf_counter  # a local: the finally may run at exit, module globals gone
        started = clock()
        finished = False
        taken = waited = 0.0
        ring = self._ring
        if ring is None:  # pragma: no cover - __iter__ always builds it first
            raise FastloaderError("internal: the batch ring was not built")
        try:
            while True:
                if self._active is not producer:
                    raise FastloaderError("this iterator was ended because a newer pass over "
                                          "the same FastLoader started, or it was closed, or "
                                          "this process was forked from the one that began "
                                          "it; start a new pass with iter(loader)")
                asked = time.perf_counter()
                if taken:  # the training loop's own time on the batch it had
                    self._tuner.record_consume(waited, asked - taken)
                item = producer.get(self._counters)
                taken = time.perf_counter()
                waited = taken - asked
                if item is None:
                    finished = True
                    break
                start_copy = time.perf_counter()
                images, labels, event = self._step(ring.view(item.slot, item.count)[0],
                                                   item.labels, item.images)
                ring.release(item.slot, event)
                if self._gpu_ops is not None:
                    with self._step.on_device():
                        images, labels = self._gpu_ops(images, labels, gpu_rng(
                            epoch_plan.seed, epoch_plan.epoch, item.index, epoch_plan.rank))
                self._counters.add_time("copy", self._step.copy_seconds(
                    time.perf_counter() - start_copy))
                self._counters.add_batch(item.count)
                self._batches_done = item.index + 1
                yield self._collate(images, labels, item.samples, (
                    epoch_plan.seed, epoch_plan.epoch, item.index, epoch_plan.rank),
                    item.geometry, item.masks)
        finally:
            self._counters.add_time("active", clock() - started)
            if self._active is producer:
                self._stop_active()
            if finished:
                self._batches_done = 0
                self.sampler.set_epoch(epoch_plan.epoch + 1)

    def _stop_active(self) -> None:
        producer, self._active = self._active, None
        if producer is not None:
            producer.shutdown()
            if self._ring is not None:
                self._ring.reset()

    def _end_active_pass(self) -> None:
        self._stop_active()

    def stats(self) -> LoaderStats:
        """Live counters (see fastloader.loader.stats.LoaderStats); .as_dict() for a plain dict."""
        ring = self._ring
        active = self._active
        return self._counters.snapshot(
            queue_depth=active.queue_depth() if active is not None else 0,
            prefetch=self.prefetch,
            ring_slots=ring.slots if ring is not None else self.prefetch + 1,
            ring_bytes=ring.nbytes if ring is not None else 0,
            pinned=ring.pinned if ring is not None else False,
            num_threads=self._decoder.num_threads,
            backend=self._decoder.backend,
            autotune_state=self._tuner.state,
        )

    @property
    def prefetch(self) -> int:
        """Batches the producer may run ahead (the tuner's current choice when "auto")."""
        return self._tuner.prefetch

    @property
    def num_threads(self) -> int:
        """Decode threads (the tuner's current choice when "auto")."""
        return self._tuner.threads

    def close(self) -> None:
        """Stop the producer, free the ring and decoder threads, close an owned dataset."""
        if self._closed:
            return
        self._closed = True
        self._stop_active()
        self._decoder.close()
        extra: ExtraImages | None = getattr(self, "_extra_images", None)
        if extra is not None:
            extra.close()
        self._step.close()
        self._ring = None
        if self._owns_dataset:
            self._data.close()

    def _after_fork_in_child(self) -> None:
        """In a forked child: the producer thread and its helper exist only in the parent,
        and the ring, counters and tuner may have been mid-update there. Forget the pass
        (its iterator ends with a clear error), and rebuild the ring on the next pass. The
        native decoder rebuilds its own thread pool (csrc/batch.cpp's fork handler)."""
        if self._closed:
            return
        self._active = None
        self._ring = None
        self._counters = Counters()
        self._tuner.after_fork()

    def __repr__(self) -> str:
        if not hasattr(self, "sampler"):
            return "FastLoader(<not built>)"
        return (f"FastLoader({str(self._data.root)!r}, batch_size={self.batch_size}, "
                f"image_size={self.image_size}, device={self.device}, "
                f"num_threads={self.num_threads}, prefetch={self.prefetch}, "
                f"autotune={self._tuner.state}, {self.sampler!r})")
