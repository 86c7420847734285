"""FastLoader: the loaders' public class, its signature (one typing.overload per path), and
the factory that builds the loader of the path its arguments choose (path_choice.py).

The loaders (loader/packed/, mix/, dali/, dropin/, and clips/audio.py, clips/video.py) subclass
FastLoader here and register under their path's name; what they implement is interface.py's
LoaderInterface. loader/loader.py, the module `fastloader.FastLoader` is read from, imports the
paths of their own; every path's loader module is named in paths.py, and the factory imports it
there the first time its path is chosen (audio=, video=), so this module never imports a loader.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

import torch

from fastloader.errors import FastloaderError
from fastloader.loader.factory.arguments import factory_signature, loader_signature
from fastloader.loader.factory.audio_options import Audio, AudioArgs
from fastloader.loader.factory.interface import LoaderInterface
from fastloader.loader.factory.keywords import DaliArgs, PackedArgs
from fastloader.loader.factory.option_paths import paths
from fastloader.loader.factory.path_choice import PackedData, path_of
from fastloader.loader.factory.paths import PATHS
from fastloader.loader.factory.video_options import Video, VideoArgs

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the overloads' annotations are not run
    from typing_extensions import Unpack


class FastLoader(LoaderInterface):
    """Iterate (images, labels) batches, like torch.utils.data.DataLoader but faster.

    `FastLoader(...)` returns one of three loaders, each a FastLoader with the same interface
    (iteration, len, set_epoch, state_dict/load_state_dict, stats, close, context manager):

    - `data` a packed dataset path (or an open PackedDataset): the packed loader
      (fastloader.loader.packed.loader.PackedLoader), the fast path. A producer thread runs
      `prefetch` batches ahead, decoding with `num_threads` native threads (GIL released)
      straight into a fixed ring of (pinned, with CUDA) uint8 buffers; `transforms` run fused
      into decode (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip) with parameters
      drawn from (seed, epoch, batch, rank), so results never depend on the thread count.
      Images come out NCHW on `device` (default: this process's CUDA device when there is
      one): uint8 without `normalize`, else `dtype` (float32) computed as (x/255 - mean) / std;
      mean/std in 0-1 scale, or 0-255 scale when a mean exceeds 1. Labels int64.
    - `data` a list `[a, b]` or a dict `{name: a}` of packed datasets (paths, URLs,
      PackedDatasets): the mixed loader (fastloader.loader.mix.loader.MixLoader), the packed loader
      over a weighted mix: `weights`, `epoch_size`, `replacement`, `source_index`,
      `shared_fields` (docs/mixing.md).
    - the same with `backend="dali"`: the DALI loader (fastloader.loader.dali.loader.DaliLoader):
      DALI decodes, with nvJPEG on a GPU; needs `pip install "fastloader[dali]"`.
    - `data` any dataset torch's DataLoader takes (anything with __getitem__ and __len__, such
      as a map-style torch Dataset or a Hugging Face datasets.Dataset; or an iterable dataset:
      a torch IterableDataset, a datasets.IterableDataset): the drop-in loader
      (fastloader.loader.dropin.loader.DropInLoader), torch's DataLoader with tuned defaults;
      DataLoader's own keyword arguments are accepted there.

    `num_threads="auto"` (the default) tunes the decode threads online: it starts at all the
    cores this rank may use and steps down only when fewer threads are as fast or still keep
    up with the training step (see fastloader.loader.pipeline.autotune), then keeps the choice for
    the run; an int fixes it, None means all those cores. `prefetch="auto"` likewise deepens the
    ring while the consumer waits on a bursty producer, never beyond `memory_budget` bytes of
    ring (512 MiB by default). stats() shows the choice.

    `on_error`: "raise" (default) stops at the first undecodable or corrupt record, naming it;
    "skip" replaces it with the next good record and counts it in stats(). `max_skips` (packed
    loader) is skip's error budget per pass: a count, or a fraction of the pass's samples;
    past it the pass fails naming every skipped record. Skips, autotune decisions and
    fallbacks are logged on the "fastloader" logger (logging.getLogger("fastloader")).

    `verify_records=True` (packed loader; default False) checks each record's crc32 as it is
    read (about 3% of the loader's CPU on ImageNet-sized records): a damaged record then fails as
    CorruptRecordError, which `on_error="skip"` skips, instead of being decoded as whatever its
    bytes now say.

    `backend`: "auto" (native decode, Pillow when the extension is missing), "native" (demand
    the extension), "pillow", or "dali". `gpu_transforms`: fastloader.gpu.ops transforms
    applied batched on `device` after the copy, on uint8 pixels, before normalize.

    Each iter() is a pass over one epoch. A pass that was started (run to its end or cut
    short) moves the next pass to the next epoch, reshuffled, as DataLoader(shuffle=True)
    reshuffles on every iter(); set_epoch(e) chooses the next pass's epoch explicitly. Rank and
    world size (unless given) are read from torch.distributed when each pass starts.

    Packed path only: `sampler` (any sized iterable of indices) sets each epoch's order before
    sharding; `batch_transform` (a callable of the uint8 NCHW batch, returning one like it)
    runs on the producer thread before normalize. See docs/training.md.

    Args:
        data: a packed dataset folder (str or PathLike), its fsspec URL (s3://, gs://,
            http(s)://, file://; read through the shard cache), an open PackedDataset (the
            caller closes it), or a dataset torch's DataLoader takes (map-style: anything with
            __getitem__ and __len__; or iterable): the drop-in loader.
        batch_size: samples per batch, >= 1.
        shuffle: a new order each epoch, drawn from (seed, epoch).
        seed: the seed of the order and of every random crop and flip.
        transforms: CPU transforms fused into decode (RandomResizedCrop, Resize, CenterCrop,
            RandomHorizontalFlip; packed native/Pillow paths also ResizeFit, RandomIoUCrop);
            None needs images of one size. The packed path also takes pixel ops after them
            (fastloader.ColorJitter, GaussianBlur, TrivialAugmentWide, ...),
            each sample's drawn from (seed, epoch, sample, view) (docs/views.md).
        views: packed loader only: a list of fastloader.View(transforms, count); each batch
            then holds a list of image batches, one a view (each View's count in turn), in the
            images' place, every view of a sample from one decode of its record (docs/views.md).
        pixel_ops_on: packed loader only: where the pixel ops run: "auto" (fused in the decode
            on the CPU target, batched on the device otherwise), "cpu" or "device".
        normalize: (mean, std), 3 values each, in the 0-1 or 0-255 scale; None gives uint8.
        dtype: the floating output dtype with normalize (default float32).
        device: "cuda", "cuda:k" or "cpu"; default this process's CUDA device if any.
        num_threads: decode threads: "auto" (tuned online), an int, or None (all cores of
            this rank).
        prefetch: batches decoded ahead: an int >= 1 or "auto".
        drop_last: drop each rank's last partial batch.
        rank: this process's rank; default from torch.distributed when initialised, else 0.
        world_size: the number of ranks (default likewise).
        on_error: "raise" or "skip" (replace a bad record by the next good one).
        max_skips: with on_error="skip", the most samples one pass may replace: a count, or
            a fraction of the pass's samples; None for no limit (packed loader only).
        backend: "auto", "native", "pillow" or "dali".
        memory_budget: bytes of ring prefetch="auto" may use (default 512 MiB).
        gpu_transforms: fastloader.gpu ops run batched on device after the copy.
        memory_format: torch.contiguous_format (default) or torch.channels_last output.
        sampler: packed loader only: any sized iterable of indices giving each epoch's order
            (before sharding across ranks); not with shuffle=True.
        batch_transform: packed loader only: a callable on the uint8 NCHW batch that returns
            one like it, run on the producer thread before normalize (it holds the GIL).
        fields: packed loader only, for a dataset with fields (pack(samples, fields=...), a
            table, WebDataset files): the field names each batch holds, as a tuple in that
            order. None: (images, labels) for an image + label dataset, else a dict of every
            field. Collation (fastloader.loader.images.collate): int/float -> tensor [B]; fixed
            ndarrays -> tensor [B] + shape; variable-length ndarrays -> a list of tensors;
            text, bytes, json -> lists; further image fields -> uint8 (B, 3, H, W); boxes
            -> lists of float32 [k, 4] in output pixels; mask fields -> uint8 [B, H, W],
            cropped, resized (nearest) and flipped with their image's plan.
        multi_hot: packed loader only: NUM_CLASSES (or {field: NUM_CLASSES}) turns a
            variable-length int field (a multi-label list) into a [B, C] float32 tensor.
        padded: packed loader only: a variable-length ndarray field (variable in its first
            dim) comes as (values zero-padded to the batch's longest, lengths [B]).
        min_box_visibility: packed loader only: a boxes field's box whose visible area, after
            the sample's crop, is below this fraction of its whole area is dropped with its
            per-box fields (default 0.25; 0 keeps every box with any area inside).
        decode_images: packed loader only: further image fields (beyond the first) are
            decoded with the same transforms, their own crops and flips, as uint8 tensors
            (True, the default); False yields their encoded bytes.
        cache_dir, cache_limit, storage_options: packed loader on a dataset URL (s3://,
            gs://, http(s)://, file://): the node's shard cache folder, its byte limit (int or
            "200GB"), fsspec options (docs/object-storage.md).
        shuffle_window: packed loader: shards shuffled together by the shard-aware shuffle
            (default 8 on a URL; None on a local dataset: the full permutation).
        prefetch_shards: packed loader on a URL: shards downloaded ahead of the reader.
        remote: a fastloader.Remote: decode batches on Ray actors too (packed, mixed, audio
            and video loaders), the same batches in the same order; loader.remote is then the
            workers' pool (docs/remote-workers.md).
        verify_records: packed loader only: check each record's crc32 as it is read.
        roi_decode: DALI loader only: decode only the planned crop box (False: whole images,
            then slice; DALI's docs say ROI decode turns the A100/H100 hardware decoder off).
        apply_exif_orientation: packed loader: show each image as PIL.ImageOps.exif_transpose
            turns it, crops planned on the turned image, boxes and masks turned with it, from
            the orientations `packdata --apply-exif-orientation` stored (never parsed per
            sample). None (default): as the dataset was packed (as stored unless packed so);
            False: as stored; True needs a dataset packed so. The DALI loader refuses True.
        audio: a fastloader.Audio: the audio loader (fastloader.loader.clips.audio.AudioLoader) of
            a packed dataset of clips; each batch's clips come as (float32 [B, C, T]
            zero-padded, lengths int64 [B]) in the records' place (docs/audio.md).
        max_batch_seconds: audio loader only: batches by duration, each within this many
            padded seconds (count x its longest clip), from duration_buckets buckets of clip
            length (loader/order/duration_batches.py); None: batch_size clips a batch.
        duration_buckets: audio loader only: the duration plan's bucket count (default 8).
        video: a fastloader.Video: the video loader (fastloader.loader.clips.video.VideoLoader) of
            a packed dataset of videos; each batch's videos come as (frames uint8
            [B, T, C, H, W], timestamps float32 [B, T]) in the records' place, with one crop
            and flip of `transforms` a video (docs/video.md).
        **dataloader_kwargs: the drop-in loader only: torch DataLoader arguments.

    Which path takes which argument is read from the options classes (PackedOptions,
    DaliOptions, DropInOptions of fastloader.loader.factory.options; AudioOptions, VideoOptions
    beside fastloader.Audio and fastloader.Video) by fastloader.loader.factory.option_paths. An
    argument of another path is taken at FastLoader's default (so one set of keyword arguments
    serves every path) and refused, naming the path it belongs to, at any other value. Every
    argument is checked before a file is opened or a thread started.

    Returns:
        FastLoader: a PackedLoader, DaliLoader or DropInLoader. Iterating it yields
        (images, labels) batches: images (N, 3, H, W) on device, labels (N,) int64 (with
        fields: a tuple or dict, see fields).

    Raises:
        InvalidArgumentError: an argument is out of range or names a wrong choice (the
            message names it and how to fix it).
        InvalidTypeError: an argument has the wrong type.
        DatasetNotFoundError: data is a path with no packed dataset.
        NativeUnavailableError: backend="native" without the extension.
        OptionalDependencyError: backend="dali" without NVIDIA DALI installed.
        DecodeError: while iterating, with on_error="raise", an undecodable record (or, with
            on_error="skip", more than max_skips of them); it names the record and batch.
        CorruptRecordError: while iterating, a record fails its read.
        ProducerError: while iterating, the dataset or a transform raised another exception
            (chained as its __cause__).
    """

    # The factory: FastLoader(...) builds the loader of its path (loader/factory/path_choice.py).
    # Its six faces (packed, DALI, audio, video, a weighted mix: loader/mix/loader.py, drop-in) are
    # the overloads below, the packed loader's first, for type checkers: each names the argument
    # that chooses its path and unpacks its path's keywords, a TypedDict
    # (loader/factory/keywords.py, and each output's beside its settings) written once and held to
    # its options class (loader/factory/options.py) by tests/test_factory.py. At run time the
    # signature (inspect.signature, help()) is derived from those classes
    # (loader/factory/arguments.py), and each loader's __init__ binds what type.__call__ passes on
    # to its options class (`data` defaults to None only so that copy and pickle may call
    # __new__ bare).

    @overload
    def __new__(cls, data: PackedData, batch_size: int = 1, shuffle: bool = False,
                **options: Unpack[PackedArgs]) -> FastLoader: ...

    @overload
    def __new__(cls, data: PackedData, batch_size: int = 1, shuffle: bool = False, *,
                backend: Literal["dali"], **options: Unpack[DaliArgs]) -> FastLoader: ...

    @overload
    def __new__(cls, data: PackedData, batch_size: int = 1, shuffle: bool = False, *,
                audio: Audio, **options: Unpack[AudioArgs]) -> FastLoader: ...

    @overload
    def __new__(cls, data: PackedData, batch_size: int = 1, shuffle: bool = False, *,
                video: Video, **options: Unpack[VideoArgs]) -> FastLoader: ...

    @overload
    def __new__(cls, data: list[PackedData] | tuple[PackedData, ...] | Mapping[str, PackedData],
                batch_size: int = 1, shuffle: bool = False, *,
                weights: Sequence[float] | Mapping[str, float] | None = None,
                epoch_size: int | str | None = None, replacement: bool = False,
                source_index: bool = False, shared_fields: bool = False,
                **options: Unpack[PackedArgs]) -> FastLoader: ...

    @overload
    def __new__(cls, data: torch.utils.data.Dataset[Any], batch_size: int | None = 1,
                shuffle: bool = False, *, seed: int = 0,
                device: str | torch.device | None = None, drop_last: bool = False,
                rank: int | None = None, world_size: int | None = None,
                **dataloader_kwargs: Any) -> FastLoader: ...

    def __new__(
        cls,
        data: object = None,
        batch_size: int | None = 1,
        shuffle: bool = False,
        **options: object,
    ) -> FastLoader:
        # Its signature, every path's options together, is derived from the options classes
        # (set below); the loader chosen checks the arguments.
        if cls is FastLoader:  # the factory: a subclass builds itself
            cls = FastLoader._loader_of(path_of(data, options))
        return super().__new__(cls)

    # Each loader's class, by path ("packed loader", "DALI loader", "drop-in loader"): filled
    # as each subclass is defined (class PackedLoader(FastLoader, path="packed loader")).
    _paths: ClassVar[dict[str, type[FastLoader]]] = {}
    _path: ClassVar[str] = ""  # a subclass's own path, as its class statement names it

    def __init_subclass__(cls, path: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if path is not None:
            FastLoader._paths[path] = cls
            cls._path = path
        # A loader's signature is its own, not the factory's (inspect, Sphinx): its path's
        # options (loader/factory/arguments.py), or else its own __init__'s (the mixed loader's).
        if path in paths():
            cls.__signature__ = loader_signature(path)  # type: ignore[attr-defined]
        elif "__init__" in cls.__dict__:
            signature = inspect.signature(cls.__init__)
            cls.__signature__ = signature.replace(  # type: ignore[attr-defined]
                parameters=list(signature.parameters.values())[1:],
                return_annotation=inspect.Signature.empty)

    @staticmethod
    def _loader_of(path: str) -> type[FastLoader]:
        if path not in FastLoader._paths and path in PATHS:
            PATHS[path].import_loader()  # its class registers the path as it is defined
        loader = FastLoader._paths.get(path)
        if loader is None:
            raise FastloaderError(f"the {path} was not imported: build loaders through "
                                  "fastloader.FastLoader (fastloader.loader.loader)")
        return loader


# FastLoader(...)'s signature (inspect.signature, help()): every path's options, derived from
# their classes. On __new__, where it was written before, so that Sphinx still lists the
# overloads above (checked against those classes by tests/test_factory.py) with it.
FastLoader.__new__.__signature__ = factory_signature()  # type: ignore[attr-defined]
