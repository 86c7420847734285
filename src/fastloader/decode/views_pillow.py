"""The Pillow path of decode_views_into for one sample: the record decoded once, then every
view cropped, resized, mirrored, given its pixel program and made channel-first, as
decode_slot_pillow does one crop; a failure zero-fills every view and is reported."""

from __future__ import annotations

import threading

import numpy as np
from PIL import Image

from fastloader.decode import coeffs
from fastloader.decode.batch_args import as_bytes_like
from fastloader.decode.pillow import decode_whole, to_planar
from fastloader.decode.pillow_batch import crop_or_none
from fastloader.decode.pixels import PixelProgram
from fastloader.decode.pixels.reference import apply_steps
from fastloader.decode.views import ViewBatch
from fastloader.errors import DecodeError, FastloaderError

__all__ = ["DecodeCount", "apply_program_row", "decode_views_pillow", "finish_slot", "finish_view"]


class DecodeCount:
    """Records decoded so far (one read and one entropy decode each), counted where the decode
    runs, from any thread: the proof a test reads that views share their sample's decode."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def add(self, records: int = 1) -> None:
        with self._lock:
            self._count += records

    @property
    def value(self) -> int:
        return self._count


def _union(boxes: list[tuple[int, int, int, int] | None], height: int, width: int
           ) -> tuple[int, int, int, int]:
    """The smallest box (top, left, height, width) holding every view's box (None: whole)."""
    if any(box is None for box in boxes):
        return 0, 0, height, width
    top = min(b[0] for b in boxes if b)
    left = min(b[1] for b in boxes if b)
    bottom = max(b[0] + b[2] for b in boxes if b)
    right = max(b[1] + b[3] for b in boxes if b)
    return top, left, bottom - top, right - left


def _coeffs_union(data: object, boxes: list[tuple[int, int, int, int] | None],
                  orientation: int, count: DecodeCount) -> tuple[Image.Image, int, int]:
    """A coeffs record's union of the views' boxes decoded once at full scale, and its origin."""
    if orientation != 1:  # as decode_slot_pillow: refused
        raise DecodeError("coeffs record: EXIF orientation is not supported for coeffs records")
    header = coeffs.header(data)  # type: ignore[arg-type]
    for box in boxes:
        if box is not None and (box[0] + box[2] > header.height or box[1] + box[3] > header.width):
            raise DecodeError(f"crop {box} (top, left, height, width) does not fit in the "
                              f"{header.height}x{header.width} (HxW) image")
    top, left, height, width = _union(boxes, header.height, header.width)
    count.add()
    pixels = coeffs.decode_record(data, (top, left, height, width), None, False)  # type: ignore[arg-type]
    return Image.fromarray(pixels, "RGB"), top, left


def _view(image: Image.Image, box: tuple[int, int, int, int] | None, origin: tuple[int, int],
          slot: np.ndarray, flip: bool) -> None:
    """One view into its slot: its box of image (at origin in the stored image), resized
    BILINEAR to the slot, mirrored (decode_pillow's crop, resize and flip)."""
    if box is not None:
        top, left = box[0] - origin[0], box[1] - origin[1]
        if box[0] + box[2] > origin[0] + image.height or box[1] + box[3] > origin[1] + image.width:
            raise DecodeError(
                f"crop (top={box[0]}, left={box[1]}, height={box[2]}, width={box[3]}) does not "
                f"fit in the {image.height}x{image.width} image; the index or the planned crop "
                "is wrong")
        image = image.crop((left, top, left + box[3], top + box[2]))
    height, width = slot.shape[:2]
    if (image.height, image.width) != (height, width):
        image = image.resize((width, height), Image.Resampling.BILINEAR)
    if flip:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    slot[...] = np.asarray(image)


def decode_views_pillow(record: object, k: int, batch: ViewBatch, count: DecodeCount
                        ) -> str | None:
    """Sample k's views into their slots from one decode of record; None, or why it failed
    (then every view's slot is zero and its planar the conversion of zeros)."""
    orientation = 1 if batch.turns is None else int(batch.turns[k])
    try:
        data = as_bytes_like(record, "record")
        boxes = [crop_or_none(batch.crops[k, v]) for v in range(batch.views)]
        if coeffs.is_coeffs(data):
            image, top, left = _coeffs_union(data, boxes, orientation, count)
        else:
            count.add()
            image, top, left = decode_whole(data, orientation), 0, 0
        for v, box in enumerate(boxes):
            _view(image, box, (top, left), batch.outs[v][k], bool(batch.flips[k, v]))
        error = None
    except (DecodeError, FastloaderError, TypeError) as exc:
        error = str(exc)
    for v in range(batch.views):
        finish_view(batch, v, k, error is None)
    return error


def finish_view(batch: ViewBatch, v: int, k: int, ok: bool) -> None:
    """After view v of sample k is written: its pixel program (a decoded sample only), or its
    slot zeroed (a failed one); then its channel-first copy."""
    slot = batch.outs[v][k]
    if not ok:
        slot.fill(0)
    planar = batch.planars[v]
    finish_slot(slot, ok, batch.programs[v], k, None if planar is None else planar[k],
                batch.scale, batch.shift)


def finish_slot(slot: np.ndarray, ok: bool, program: PixelProgram | None, k: int,
                planar_row: np.ndarray | None, scale: np.ndarray | None,
                shift: np.ndarray | None) -> None:
    """Sample k's slot after the Pillow path wrote it: its pixel program (when it decoded),
    then its channel-first copy (when one is asked)."""
    if ok and program is not None:
        apply_program_row(slot, program, k)
    if planar_row is not None:
        to_planar(slot, planar_row, scale, shift)


def apply_program_row(slot: np.ndarray, program: PixelProgram, k: int) -> None:
    """Row k of a PixelProgram applied in place to one (H, W, 3) sample, by Pillow's
    definitions (the Pillow path's pixel ops): its steps in order, no-ops skipped wherever
    they stand, as the native and device paths skip them."""
    row = program.codes[k]
    if row.any():
        slot[...] = np.asarray(apply_steps(Image.fromarray(slot, "RGB"), row, program.params[k]))
