"""PackedLoader: FastLoader over a packed dataset, decoded by the native pipeline (or Pillow)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from fastloader.decode.augment import output_size
from fastloader.decode.decode import BatchDecoder
from fastloader.errors import FastloaderError, InvalidArgumentError, invalid_argument
from fastloader.format.kinds import EncodedImage, loaded_by
from fastloader.format.open import dataset_from
from fastloader.gpu.device import DeviceStep
from fastloader.loader.factory.arguments import options_from
from fastloader.loader.factory.attributes import PackedAttributes
from fastloader.loader.factory.base import FastLoader
from fastloader.loader.factory.options import PackedOptions, Sampler, exif_turns
from fastloader.loader.factory.pass_dataset import PassDataset, collate_rows, unwrap_view
from fastloader.loader.factory.path_choice import PackedData
from fastloader.loader.images.batches import EpochPlan, ImageBatches, ReadyBatch
from fastloader.loader.images.collate import FieldCollator, ViewCollator
from fastloader.loader.images.detection import letterboxed, plan_boxes_field
from fastloader.loader.images.extra_images import ExtraImages
from fastloader.loader.images.masks import MaskBatches
from fastloader.loader.images.pixels import PixelPlan
from fastloader.loader.images.views import ViewBatches
from fastloader.loader.order.mix_order import MixOrder
from fastloader.loader.order.passes import EpochPasses, ended_pass
from fastloader.loader.order.resume import dataset_identity
from fastloader.loader.order.sampler import EpochSampler
from fastloader.loader.packed.outputs import BatchOutputs
from fastloader.loader.packed.storage import RemoteOptions, plan_shards, remote_options
from fastloader.loader.packed.views import (
    refuse_extra_images,
    refuse_moving_policies,
    view_layout,
    view_specs,
)
from fastloader.loader.packed.workers import remote_filler, start_pool
from fastloader.loader.pipeline.autotune import make_tuner
from fastloader.loader.pipeline.memory import BatchRing, pinned_nbytes
from fastloader.loader.pipeline.producer import Producer, Tuning
from fastloader.loader.pipeline.stats import Counters, LoaderStats
from fastloader.loader.remote.cluster import WorkerPool
from fastloader.loader.remote.dispatch import RemoteBatches

ImageProducer = Producer[Any, ReadyBatch]  # PreparedImages, or remote=' tickets


def _check_memory(batch_size: int, image_size: tuple[int, int], slot_bytes: int) -> None:
    """Refuse at construction a ring that could only fail later, at the first batch."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 2 * slot_bytes > memory:  # the ring holds at least two batches
        raise invalid_argument(
            "batch_size", batch_size, f"two batches of {batch_size} x {image_size[0]} x "
            f"{image_size[1]} x 3 bytes ({2 * slot_bytes / 2**30:.1f} GiB) exceed this "
            f"machine's {memory / 2**30:.1f} GiB of memory",
            "Lower batch_size or the output size of transforms.")


class PackedLoader(EpochPasses, FastLoader, PackedAttributes, path="packed loader"):
    """FastLoader over a packed dataset: the native (or Pillow) decode pipeline.

    Built by FastLoader(path_or_packed_dataset, ...); see FastLoader for the arguments.
    `dataset` is its passes as an IterableDataset of samples and `collate_fn` turns a batch's
    samples back into that batch, so a DataLoader rebuilt from these attributes (Accelerate's
    skip_first_batches) yields this loader's batches; `dataset.packed` is the PackedDataset.
    """

    collate_fn = staticmethod(collate_rows)

    def __init__(self, data: PackedData, *args: object, **kwargs: object) -> None:
        # Every argument first (nothing is opened or started until all are good) ...
        options = options_from(PackedOptions, "packed loader", args, kwargs)[0]
        data = unwrap_view(data)  # another loader's `dataset`: its packed dataset
        remote = remote_options(data, options)
        # ... then the dataset, the decoder and what the dataset's fields need; a failure
        # here (a field or size the dataset refuses) releases what was taken so far.
        with contextlib.ExitStack() as undo:
            self._open(data, options, remote, undo)
            undo.pop_all()
        self._built()

    def _order_source(self, options: PackedOptions) -> Sampler | MixOrder:
        """What sets each epoch's order before sharding: the user's sampler= (None: the
        seeded permutation); a mix gives its own (loader/mix/loader.py)."""
        return options.sampler

    def _open(self, data: object, options: PackedOptions, remote: RemoteOptions,
              undo: contextlib.ExitStack) -> None:
        """Take the dataset, decoder and ring plan, each released by `undo` on a failure."""
        self._set_options(options)
        self._remote = remote
        self._data, self._owns_dataset = dataset_from(
            data, "a packed dataset path or URL, a PackedDataset or a map-style torch Dataset",
            **remote.open_options)
        if self._owns_dataset:
            undo.callback(self._data.close)
        records = self._data.fields[self._data.image_field].kind
        if not isinstance(records, EncodedImage):
            values, argument = loaded_by(records, "another loader")
            raise invalid_argument("data", str(self._data.root), f"holds {values}, not images",
                                   f"Pass {argument} for their loader.")
        # On the dataset, which reads the records (the producer's reads go through it). Off by
        # default: it costs ~3% of the loader's CPU on ImageNet-sized records
        # (docs/damaged-data.md).
        if options.verify_records or self._owns_dataset:  # a caller's keeps its own choice
            self._data.verify_records = options.verify_records
        self._turns = exif_turns(options.apply_exif_orientation, self._data)
        # the index's own shapes (turned, or no orientations): their distinct values come
        # with its stamp, no scan of every row; an oriented pack shown as stored scans
        as_indexed = self._turns.orientations is not None or self._data.orientations is None
        shapes = self._data.distinct_shapes if as_indexed else self._turns.shapes
        self._layout = view_layout(self._views, shapes, self.batch_size)  # None: no views=
        # views=: each view's (height, width), image_size the first's; () without views
        self.view_sizes = () if self._layout is None else self._layout.sizes
        self.image_size = (self.view_sizes[0] if self.view_sizes
                           else output_size(self.transforms, shapes))
        self.sampler = EpochSampler.for_loader(len(self._data), options.seed, options.rank,
                                               options.world_size, options.shuffle,
                                               self.drop_last, self._order_source(options))
        self.sampler.shard_layout = remote.layout(self._data)
        self.sampler.dataset_id = dataset_identity(self._data)  # a checkpoint must match it
        self._step = DeviceStep(self.device, *options.step_args)
        undo.callback(self._step.close)
        self._outputs = BatchOutputs(self._step, options.after_copy, self._layout)
        self._decoder = BatchDecoder(1, options.backend)  # the tuner sets its thread count
        undo.callback(self._decoder.close)
        self._init_fields(options, undo)
        height, width = self.image_size
        slot_bytes = pinned_nbytes(self.batch_size * height * width * 3 if self._layout is None
                                   else self._layout.slot_bytes)  # what a slot pins
        _check_memory(self.batch_size, self.image_size, slot_bytes)
        # num_threads=None means a fixed count: the cores this rank may use.
        self._tuner = make_tuner(
            self._max_threads if options.num_threads is None else options.num_threads,
            options.prefetch, options.memory_budget, self._max_threads, slot_bytes)
        self._decoder.num_threads = self._tuner.setting().threads
        # remote=: the workers, started once every argument and the dataset were accepted
        self.remote: WorkerPool | None = start_pool(
            options, self._data, self.image_size, self._box_field, self._collate.mask_fields,
            self._step.planar is not None, self._pixels, self._views, self._layout)
        if self.remote is not None:
            undo.callback(self.remote.close)
        # DataLoader's `dataset`: this loader's passes as samples (loader/factory/pass_dataset.py).
        self.dataset = PassDataset(self, self._data)

    def _set_options(self, options: PackedOptions) -> None:
        """The checked options this loader keeps, and its state before the first pass."""
        self.batch_size = options.batch_size
        self.drop_last = options.drop_last
        self.on_error = options.on_error
        self.transforms = options.decode_transforms
        self._views = view_specs(options.view_list, options.pixels_on_device)
        self._pixels = PixelPlan(options.pixel_ops, options.pixels_on_device)
        self.max_skips = options.max_skips  # on_error="skip"'s budget
        self.batch_transform = options.batch_transform
        self.device = options.target
        self._gpu_ops = options.gpu_ops
        self._max_threads = options.max_threads
        self._extra_images: ExtraImages | None = None
        self.remote = None  # remote=: the loader's Ray workers (add(), stats()), set by _open
        self._ring: BatchRing | None = None
        self._active: ImageProducer | None = None
        self._dispatch: Any = None  # the pass's filler (remote=: it cancels what is queued)
        self._resume_batch = 0
        self._batches_done = 0
        self._counters = Counters()

    def _init_fields(self, options: PackedOptions, undo: contextlib.ExitStack) -> None:
        """What each batch holds: (images, labels), a tuple of fields= or a dict."""
        extra = [n for n, s in self._data.fields.items()
                 if isinstance(s.kind, EncodedImage) and n != self._data.image_field]
        if extra and options.decode_images:
            refuse_extra_images(self._views, [n for n in extra if options.fields is None
                                              or n in options.fields])
            self._extra_images = ExtraImages(self.transforms, options.backend)
            undo.callback(self._extra_images.close)
        self._collate = FieldCollator(self._data, options.fields, options.multi_hot,
                                      options.padded, self._extra_images,
                                      options.min_box_visibility, letterboxed(self.transforms))
        refuse_moving_policies([*self._pixels.ops, *(
            op for view in self._views for op in view.pixels.ops)],
            [*self._collate.box_fields, *self._collate.mask_fields])
        if self._views:  # a batch of views: a list of images, spatial fields a view
            self._collate = ViewCollator(self._collate)  # type: ignore[assignment]
        self._box_field = plan_boxes_field(self._data, [*self.transforms, *(
            op for view in self._views for op in view.transforms)])
        if self._gpu_ops is not None and self._collate.box_fields:
            raise InvalidArgumentError(
                "gpu_transforms= with boxes fields is not supported: the device ops move "
                "pixels after the boxes were mapped. Use the CPU transforms= (fused crop, "
                "resize and flip), which move boxes with the pixels.")
        self._masks = self._mask_batches()

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

    # -- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise FastloaderError("this FastLoader was closed; create a new one to iterate")
        self._stop_active()  # one pass at a time: a new iter() ends the previous one
        if self._ring is None:
            height, width = self.image_size
            # A pinned ring takes every slot prefetch="auto" may reach now, before training.
            capacity = self._tuner.max_prefetch + 1 if self._tuner.tunes_prefetch else None
            pin = self.device.type == "cuda"
            self._ring = (BatchRing(self.prefetch + 1, self.batch_size, height, width, pin=pin,
                                    capacity=capacity) if self._layout is None
                          else self._layout.ring(self.prefetch + 1, pin, capacity))
        start = self._resume_batch  # spent by the pass's first batch (_first_batch_out)
        epoch = self.sampler.begin_pass()  # rank/world of now; a cut-short pass moves on
        first = self.sampler.pass_layout()[1]  # the number of the pass's first batch
        end = self._pass_end()
        epoch_plan = EpochPlan(self.sampler.indices(), self.batch_size, end, start,
                               epoch, self.sampler.seed, self.sampler.rank, first,
                               self.sampler.world_size)
        plan_shards(self._data, epoch_plan.indices, start - first, end - first,
                    self.batch_size)
        # The tuner may have settled on the last batch of a pass, after the producer's last
        # chance to apply it: take its setting here so a settled count is never left unapplied.
        self._decoder.num_threads = self._tuner.setting().threads
        tuner = self._tuner if self._tuner.state == "measuring" else None
        batches = self._filler(epoch_plan)
        tuning = None if tuner is None else Tuning(tuner, batches.apply)
        filler = self._dispatch = remote_filler(self.remote, batches)
        producer: ImageProducer = Producer(filler, self._ring, self._counters, batches.batches,
                                           tuning)
        if isinstance(filler, RemoteBatches):
            filler.watch(producer.stop_event)
        self._active = producer.start()
        self._batches_done = start
        return self._consume(producer, epoch_plan)

    def _filler(self, epoch_plan: EpochPlan) -> ImageBatches:
        """The pass's filler: one batch of images, or (views=) a batch a view."""
        assert self._ring is not None  # __iter__ builds it first
        if self._layout is not None:
            return ViewBatches(self._data, self._views, self._layout, self._decoder, self._ring,
                               self._counters, self.on_error, epoch_plan, self._step.planar,
                               self.max_skips, self._box_field, self._masks, self._turns)
        return ImageBatches(self._data, self.transforms, self._decoder, self._ring,
                            self._counters, self.on_error, epoch_plan, self._step.planar,
                            self.max_skips, self.batch_transform, self._box_field,
                            self._masks, self._turns, self._pixels)

    def _consume(self, producer: ImageProducer, epoch_plan: EpochPlan) -> Iterator[Any]:
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
                    raise ended_pass()
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
                seeds = (epoch_plan.seed, epoch_plan.epoch, item.index, epoch_plan.rank)
                images, labels, plan, masks = self._outputs(ring, item, seeds)
                self._counters.add_time("copy", self._step.copy_seconds(
                    time.perf_counter() - start_copy))
                self._counters.add_batch(item.count)
                self._batches_done = item.index + 1
                if item.index == epoch_plan.start:  # until now an iter() restarts this pass
                    self._first_batch_out()
                # views=: ViewCollator takes the views, a plan and masks a view
                yield self._collate(images, labels, item.samples, seeds, plan, masks)  # type: ignore[arg-type]
        finally:
            self._counters.add_time("active", clock() - started)
            if self._active is producer:
                self._stop_active()
            if finished:
                self._pass_finished(epoch_plan.epoch)

    def _stop_active(self) -> None:
        producer, self._active = self._active, None
        if producer is not None:
            producer.shutdown()
            if self._ring is not None:
                self._ring.reset()
        if hasattr(self._dispatch, "cancel"):
            self._dispatch.cancel()

    def _end_active_pass(self) -> None:
        self._stop_active()

    def stats(self) -> LoaderStats:
        """Live counters (see fastloader.loader.pipeline.stats.LoaderStats); .as_dict() for a
        plain dict."""
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
            remote_workers=self.remote.stats() if self.remote is not None else (),
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
        pool: WorkerPool | None = getattr(self, "remote", None)
        if pool is not None:
            pool.close()
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
        self.remote = None  # the parent's Ray connection and actors: not this process's
        self._counters = Counters()
        self._tuner.after_fork()

    def __repr__(self) -> str:
        if not hasattr(self, "sampler"):
            return "FastLoader(<not built>)"
        return (f"FastLoader({str(self._data.root)!r}, batch_size={self.batch_size}, "
                f"image_size={self.image_size}, device={self.device}, "
                f"num_threads={self.num_threads}, prefetch={self.prefetch}, "
                f"autotune={self._tuner.state}, {self.sampler!r})")
