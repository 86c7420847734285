"""The DALI graph of the DALI backend: planned ROI decode, resize, mirror + normalize, to torch.

DALI is optional: nothing here imports it at module import time; `import_dali()` does, and
turns its absence into an OptionalDependencyError that names the install command.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch

from fastloader.errors import OptionalDependencyError

INSTALL_HINT = 'pip install "fastloader[dali]" (or: pip install nvidia-dali-cuda120)'

# What one external_source call hands DALI for a batch: encoded records, ROI anchors (x, y),
# ROI shapes (w, h), mirror flags and labels, one list entry per sample.
FeedBatch = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray],
                  list[np.ndarray]]


def release_pipeline(pipe: Any) -> None:
    """Shut a DALI pipeline's threads down now, not whenever garbage collection reaches it.

    DALI stops its threads in Pipeline.__del__; run late, in a process forked after the
    pipeline was built (a DataLoader worker, say), that waits forever for threads the fork did
    not copy. Shutting down at release time leaves __del__ nothing to do.
    """
    shutdown = getattr(pipe, "_shutdown", None)  # DALI has no public close()
    if callable(shutdown):
        shutdown()


# Backend pipelines a forked child inherited: kept referenced for the child's whole life, since
# destroying one (even by dropping the last reference) waits for threads that exist only in the
# parent.
_INHERITED_BACKENDS: list[Any] = []


def _disown_pipelines_after_fork() -> None:
    """In a forked child, detach every DALI pipeline the parent had from its backend, without
    destroying the backend: a later Pipeline.__del__ then has nothing to shut down."""
    import nvidia.dali.pipeline as dali_pipeline

    for ref in list(getattr(dali_pipeline.Pipeline, "_pipes", ())):
        pipe = ref()
        backend = getattr(pipe, "_pipe", None)
        if backend is not None:
            _INHERITED_BACKENDS.append(backend)
            pipe._pipe = None


_FORK_HOOK_INSTALLED = False


def import_dali() -> ModuleType:
    """Import nvidia.dali, or raise OptionalDependencyError saying how to install it."""
    global _FORK_HOOK_INSTALLED
    try:
        import nvidia.dali as dali
        import nvidia.dali.fn
        import nvidia.dali.plugin.pytorch
        import nvidia.dali.types  # noqa: F401  (loads the submodules used below)
    except ImportError as exc:
        raise OptionalDependencyError(
            f'backend="dali" needs NVIDIA DALI, which cannot be imported here ({exc}). '
            f"Install it with: {INSTALL_HINT}, or use the native backend."
        ) from exc
    if not _FORK_HOOK_INSTALLED:
        os.register_at_fork(after_in_child=_disown_pipelines_after_fork)
        _FORK_HOOK_INSTALLED = True
    return dali


def dali_available() -> bool:
    """Whether NVIDIA DALI can be imported in this environment."""
    try:
        import_dali()
    except OptionalDependencyError:
        return False
    return True


@dataclass(frozen=True)
class GraphSpec:
    """Everything the DALI graph depends on, fixed when the pipeline is built."""

    batch_size: int
    num_threads: int
    device_id: int | None  # None: CPU-only pipeline (no CUDA context at all)
    prefetch: int
    out_size: tuple[int, int]
    mean: tuple[float, float, float] | None  # 0-255 scale; None: uint8 out, no normalize
    std: tuple[float, float, float] | None
    dali_float16: bool  # the output dtype is float16 (else float32 or uint8)
    seed: int
    roi_decode: bool = True  # False: decode whole images, then slice (keeps the HW decoder)
    channels_last: bool = False  # HWC output: NCHW views with channels_last strides


def decoder_args(spec: GraphSpec, rgb: Any) -> dict[str, Any]:
    """The decoder's arguments: the same orientation rule as the native path (none), and on
    the GPU ("mixed") threads the OS may move, so ranks on one node do not pin the same cores."""
    args: dict[str, Any] = {"device": "cpu" if spec.device_id is None else "mixed",
                            "output_type": rgb, "adjust_orientation": False}
    if spec.device_id is not None:
        args["affine"] = False
    return args


def build_pipeline(spec: GraphSpec, source: Callable[[], FeedBatch]) -> Any:
    """Build the DALI pipeline: external_source -> image_slice -> resize -> crop_mirror_normalize.

    The crop windows come from the source (planned by fastloader.decode.augment), so the decoder
    decodes only the crop region (nvJPEG ROI decode on "mixed") and DALI draws no random
    numbers itself: results are a function of (seed, epoch, batch, rank) like the native path.
    EXIF orientation is ignored (adjust_orientation=False), as the native and Pillow decoders
    ignore it: the planner's boxes are in stored pixels, and both backends give the same ones.
    The mixed decoder's threads are not pinned to cores (affine=False): ranks sharing a node
    would otherwise pin theirs to the same cores.
    """
    dali = import_dali()
    fn, types = dali.fn, dali.types
    pipe = dali.Pipeline(batch_size=spec.batch_size, num_threads=spec.num_threads,
                         device_id=spec.device_id, prefetch_queue_depth=spec.prefetch,
                         seed=spec.seed)
    with pipe:
        records, anchors, shapes, mirror, labels = fn.external_source(
            source=source, num_outputs=5, batch=True,
            dtype=[types.UINT8, types.FLOAT, types.FLOAT, types.INT32, types.INT64])
        decoder = decoder_args(spec, types.RGB)
        if spec.roi_decode:
            images = fn.decoders.image_slice(records, anchors, shapes, normalized_anchor=False,
                                             normalized_shape=False, **decoder)
        else:  # DALI's docs: ROI decoding disables the A100/H100 hardware JPEG decoder
            images = fn.decoders.image(records, **decoder)
            images = fn.slice(images, anchors, shapes, normalized_anchor=False,
                              normalized_shape=False)
        images = fn.resize(images, resize_x=spec.out_size[1], resize_y=spec.out_size[0],
                           interp_type=types.INTERP_LINEAR, antialias=True)
        layout = "HWC" if spec.channels_last else "CHW"
        if spec.mean is None or spec.std is None:
            images = fn.crop_mirror_normalize(images, mirror=mirror, dtype=types.UINT8,
                                              output_layout=layout)
        else:
            images = fn.crop_mirror_normalize(
                images, mirror=mirror, mean=list(spec.mean), std=list(spec.std),
                dtype=types.FLOAT16 if spec.dali_float16 else types.FLOAT, output_layout=layout)
        pipe.set_outputs(images, labels)
    pipe.build()
    return pipe


def feed_batch(records: Sequence[Any], crops: np.ndarray, flips: np.ndarray,
               labels: np.ndarray) -> FeedBatch:
    """One external_source batch from records and planned crops (top, left, h, w) and flips."""
    crops = np.asarray(crops, dtype=np.float32)
    return (
        [np.frombuffer(record, dtype=np.uint8) for record in records],
        [np.array([c[1], c[0]], dtype=np.float32) for c in crops],  # DALI wants (x, y)
        [np.array([c[3], c[2]], dtype=np.float32) for c in crops],  # and (w, h)
        [np.array(int(f), dtype=np.int32) for f in flips],
        [np.array(label, dtype=np.int64) for label in labels],
    )


def run_pipeline(pipe: Any, device: torch.device) -> Any:
    """One batch of outputs; on CUDA valid on the current torch stream, without a host wait
    (run() without cuda_stream would block the host until the batch is done)."""
    if device.type == "cuda":
        return pipe.run(torch.cuda.current_stream(device).cuda_stream)
    return pipe.run()


def to_torch(outputs: Sequence[Any], device: torch.device, dali_dtype: torch.dtype,
             dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """DALI outputs (images CHW or HWC, labels) -> torch (images NCHW on `device`, labels
    int64); HWC output comes back as an NCHW view with channels_last strides, not copied."""
    from nvidia.dali.plugin.pytorch import feed_ndarray

    image_list, label_list = outputs
    dense = image_list.as_tensor()  # one contiguous buffer (all samples share a size)
    images = torch.empty(tuple(dense.shape()), dtype=dali_dtype, device=device)
    stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
    feed_ndarray(dense, images, cuda_stream=stream)
    if str(image_list.layout()) == "HWC":
        images = images.permute(0, 3, 1, 2)
    labels = torch.from_numpy(label_list.as_array().reshape(-1).astype(np.int64, copy=False))
    if dtype != dali_dtype:
        images = images.to(dtype)  # preserves the strides, channels_last included
    return images, labels.to(device, non_blocking=True)


def dali_refuses(record: Any) -> str | None:
    """Why DALI's CPU decoder refuses one record (the first line of its error), or None.

    Run only after a pipeline failed, to find the record it failed on: a fresh one-sample
    pipeline per record, since DALI marks a pipeline that failed as unusable.
    """
    dali = import_dali()
    fn, types = dali.fn, dali.types
    pipe = dali.Pipeline(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1,
                         exec_pipelined=False, exec_async=False)
    with pipe:
        data = fn.external_source(source=lambda: [np.frombuffer(record, dtype=np.uint8)],
                                  batch=True, dtype=types.UINT8)
        pipe.set_outputs(fn.decoders.image(data, device="cpu", output_type=types.RGB,
                                           adjust_orientation=False))
    try:
        pipe.build()
        pipe.run()
    except RuntimeError as exc:
        text = str(exc).strip()
        return text.splitlines()[0] if text else repr(exc)
    finally:
        release_pipeline(pipe)
    return None
