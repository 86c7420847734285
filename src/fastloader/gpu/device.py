"""Move a uint8 NHWC batch to the target device and make it NCHW (optionally normalized)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from fastloader.errors import invalid_argument, invalid_type
from fastloader.gpu.planar import PlanarSpec
from fastloader.gpu.timing import DeviceTimer

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
MEMORY_FORMATS = (torch.contiguous_format, torch.channels_last)


@dataclass
class RaceSwitches:
    """Test-only switches of the CUDA copy (tests/test_gpu_race.py); never set elsewhere.

    `skip` names guards to leave out ("event", "wait_stream", "record_stream") so a negative
    control can show the race test sees the race each one prevents; `side_sleep_cycles`
    delays the side stream before each copy (torch.cuda._sleep) to widen the window.
    """

    skip: set[str] = field(default_factory=set)
    side_sleep_cycles: int = 0


RACE_SWITCHES = RaceSwitches()


def cuda_index(local_rank: str | None, count: int, current: int) -> int:
    """This process's GPU: LOCAL_RANK (set by torchrun) modulo the visible GPUs, else current.

    Without it every rank of a DDP job that has not called set_device yet would take cuda:0;
    modulo keeps one-visible-GPU-per-rank setups (CUDA_VISIBLE_DEVICES) on their only GPU.
    """
    if local_rank is not None and local_rank.strip().isdigit() and count > 0:
        return int(local_rank) % count
    return current


def resolve_device(device: object, default_cuda: bool) -> torch.device:
    """A torch.device from a str/device/None; None means CUDA (this rank's) when there is one.

    A CUDA device always comes back with its index (see cuda_index), fixed now: a later
    torch.cuda.set_device cannot split the side stream, constants and outputs over two GPUs.
    """
    if device is None:
        if default_cuda and torch.cuda.is_available():
            device = "cuda"
        else:
            return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise invalid_type("device", device, "a str, torch.device or None")
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise invalid_argument("device", device, str(exc), "Pass 'cpu' or 'cuda[:k]'.") from exc
    if resolved.type != "cuda":
        return resolved
    if not torch.cuda.is_available():
        raise invalid_argument("device", device, "CUDA is not available on this machine",
                               "Pass device='cpu' (or None to pick automatically).")
    count = torch.cuda.device_count()
    if resolved.index is None:
        return torch.device("cuda", cuda_index(os.environ.get("LOCAL_RANK"), count,
                                               torch.cuda.current_device()))
    if resolved.index >= count:
        raise invalid_argument("device", device, f"this machine has {count} visible GPU(s)",
                               f"Pass 'cuda:0' .. 'cuda:{count - 1}', or 'cuda' for this rank's.")
    return resolved


def resolve_memory_format(memory_format: object) -> torch.memory_format:
    """torch.contiguous_format (None, the default) or torch.channels_last."""
    if memory_format is None:
        return torch.contiguous_format
    if memory_format not in MEMORY_FORMATS:
        raise invalid_argument("memory_format", memory_format,
                               "must be torch.contiguous_format or torch.channels_last",
                               "Pass memory_format=torch.channels_last for NHWC-strided output.")
    return memory_format


def normalize_constants(normalize: object) -> tuple[np.ndarray, np.ndarray] | None:
    """Check (mean, std) and return them in the 0-255 pixel scale.

    Values are taken in torchvision's 0-1 scale (e.g. mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225)) unless a mean exceeds 1, in which case both are read as 0-255
    pixel values (e.g. mean=(123.7, 116.3, 103.5), std=(58.4, 57.1, 57.4)).
    """
    if normalize is None:
        return None
    if not isinstance(normalize, Sequence) or len(normalize) != 2:
        raise invalid_type("normalize", normalize, "a (mean, std) pair of 3 numbers each")
    try:
        mean = np.asarray(normalize[0], dtype=np.float64).reshape(-1)
        std = np.asarray(normalize[1], dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise invalid_type("normalize", normalize, "a (mean, std) pair of numbers") from exc
    if mean.size == 1:
        mean = np.repeat(mean, 3)
    if std.size == 1:
        std = np.repeat(std, 3)
    if (mean.size != 3 or std.size != 3 or not np.isfinite(mean).all()
            or not np.isfinite(std).all() or (std <= 0).any()):  # NaN <= 0 is False: test it
        raise invalid_argument("normalize", normalize,
                               "needs 3 finite means and 3 positive stds (RGB)",
                               "Pass e.g. ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)).")
    if mean.max() <= 1.0:
        mean, std = mean * 255.0, std * 255.0
    return mean, std


def resolve_dtype(dtype: object, normalized: bool) -> torch.dtype:
    """uint8 without normalize, float32 with it, unless a dtype is asked."""
    if dtype is None:
        return torch.float32 if normalized else torch.uint8
    if not isinstance(dtype, torch.dtype):
        raise invalid_type("dtype", dtype, "a torch.dtype such as torch.float32")
    if dtype == torch.uint8 and normalized:
        raise invalid_argument("dtype", dtype, "normalized images cannot be uint8",
                               "Pass a float dtype, or drop normalize to get uint8 pixels.")
    if dtype != torch.uint8 and dtype not in _FLOAT_DTYPES:
        raise invalid_argument("dtype", dtype, "images are uint8 or floating point",
                               "Pass torch.uint8, float32, float16 or bfloat16.")
    return dtype


class DeviceStep:
    """uint8 NHWC host batch -> NCHW batch on `device`: a new tensor, never the ring's memory.

    On CUDA the copy is non_blocking on a side stream; the returned event marks when the host
    buffer may be reused. Conversion (uint8 -> dtype, * scale + shift) runs on the device in
    one addcmul that reads the uint8 batch, computes in float32 and writes `dtype` (bf16 and
    fp16 included) in `memory_format` directly. Float output without normalize is scaled to
    [0, 1] like ToTensor. channels_last output is the staged NHWC memory's own order.

    On the CPU with the default layout, `planar` asks the producer to have the decoder write
    each batch channel-first into a fresh tensor (float32 with the same float32 scale and
    shift, or uint8) while each sample is still in cache; the step then only finishes that
    tensor (see __call__). channels_last on the CPU converts from the ring instead.
    """

    def __init__(self, device: torch.device, normalize: object, dtype: object,
                 memory_format: object = None) -> None:
        self.device = device
        constants = normalize_constants(normalize)
        self.dtype = resolve_dtype(dtype, constants is not None)
        self.memory_format = resolve_memory_format(memory_format)
        self.stream: torch.cuda.Stream | None = None
        self.timer: DeviceTimer | None = None
        if device.type == "cuda":
            self.stream = torch.cuda.Stream(device)
            self.timer = DeviceTimer()
        mean, std = constants if constants is not None else (np.zeros(3), np.ones(3) * 255.0)
        # y = x / std - mean / std, with x in 0-255: one multiply-add per element.
        scale, shift = (1.0 / std).astype(np.float32), (-mean / std).astype(np.float32)
        self.scale = torch.tensor(scale, device=device).view(1, 3, 1, 1)
        self.shift = torch.tensor(shift, device=device).view(1, 3, 1, 1)
        self.planar: PlanarSpec | None = None
        if device.type == "cpu" and self.memory_format == torch.contiguous_format:
            self.planar = (PlanarSpec(torch.uint8) if self.dtype == torch.uint8
                           else PlanarSpec(torch.float32, scale, shift))

    def close(self) -> None:
        """Free the recycled CPU output buffers nobody uses (tensors in use keep theirs)."""
        if self.planar is not None:
            self.planar.pool.clear()

    def __call__(self, batch: torch.Tensor, labels: np.ndarray,
                 planar: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.cuda.Event | None]:
        """Return (images NCHW, labels int64, event or None) for a host uint8 NHWC batch.

        With `planar` (the batch already decoded channel-first by the producer, as asked by
        self.planar) the images are that tensor, cast when another float dtype was asked.
        """
        if planar is not None:
            images = planar if planar.dtype == self.dtype else planar.to(self.dtype)
            return images, torch.from_numpy(labels), None
        staged, event = self._stage(batch)
        with self.on_device():
            images = self._convert(staged.permute(0, 3, 1, 2), fresh=staged is not batch)
            label_tensor = torch.from_numpy(labels).to(self.device, non_blocking=True)
        return images, label_tensor, event

    def _stage(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """The batch on the device (CUDA: copied on the side stream, guarded), and its event."""
        if self.stream is None or self.timer is None:
            return batch, None
        skip = RACE_SWITCHES.skip
        current = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream), self.timer.interval(self.stream):
            if RACE_SWITCHES.side_sleep_cycles:
                torch.cuda._sleep(RACE_SWITCHES.side_sleep_cycles)
            staged = batch.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        if "wait_stream" not in skip:
            current.wait_stream(self.stream)  # the conversion reads what the copy wrote
        if "record_stream" not in skip:
            staged.record_stream(current)  # allocated on the side stream, used on this one
        return staged, None if "event" in skip else event

    def _convert(self, nchw: torch.Tensor, fresh: bool) -> torch.Tensor:
        """NCHW view of the staged batch -> a new tensor of dtype and memory_format."""
        layout = self.memory_format
        if self.dtype == torch.uint8:
            if fresh and nchw.is_contiguous(memory_format=layout):
                return nchw  # the staged copy is already new memory in this layout
            return nchw.clone(memory_format=layout)
        images = torch.empty(nchw.shape, dtype=self.dtype, device=self.device,
                             memory_format=layout)
        # Reads uint8, computes x * scale + shift in float32, rounds once into dtype.
        return torch.addcmul(self.shift, nchw, self.scale, out=images)

    @contextlib.contextmanager
    def on_device(self) -> Iterator[None]:
        """Work enqueued inside runs with this step's device current, timed on CUDA."""
        if self.timer is None:
            yield
            return
        with torch.cuda.device(self.device), self.timer.interval(
                torch.cuda.current_stream(self.device)):
            yield

    def copy_seconds(self, host_s: float) -> float:
        """The copy step's time to count for a batch: the host's on the CPU; on CUDA the
        device time (events) of the intervals that have completed since the last call."""
        return host_s if self.timer is None else self.timer.collect()
