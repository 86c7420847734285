"""BatchDecoder's Pillow path for one record: decoded into its batch slot (crop box, flip, place
and fill, EXIF orientation; coeffs records through decode/coeffs.py), a failure reported, not
raised."""

from __future__ import annotations

import numpy as np

from fastloader.decode import coeffs
from fastloader.decode.batch_args import as_bytes_like
from fastloader.decode.pillow import decode_pillow
from fastloader.errors import DecodeError, FastloaderError


def crop_or_none(row: np.ndarray) -> tuple[int, int, int, int] | None:
    """A batch crop row as a box; [.., .., 0, 0] means the whole image."""
    top, left, height, width = (int(v) for v in row)
    if height == 0 and width == 0:
        return None
    if top < 0 or left < 0 or height < 1 or width < 1:
        raise DecodeError(
            f"invalid crop box (top={top}, left={left}, height={height}, "
            f"width={width}): top/left must be >= 0 and height/width >= 1"
        )
    return top, left, height, width


def decode_slot_pillow(record: object, crop: np.ndarray, flip: bool, slot: np.ndarray,
                        place: np.ndarray | None = None, fill: int = 0,
                        orientation: int = 1) -> str | None:
    """Decode one record into slot through Pillow; a failure zero-fills it and returns why.

    place (top, left, height, width): the resized crop goes there, the rest of slot is fill;
    orientation: the EXIF orientation the crop is planned on."""
    try:
        target = slot
        if place is not None:
            top, left, height, width = (int(v) for v in place)
            target = slot[top:top + height, left:left + width]
        data = as_bytes_like(record, "record")
        if coeffs.is_coeffs(data):
            if orientation != 1:  # as the native path: refused, and the slot zeroed below
                raise DecodeError("coeffs record: EXIF orientation is not supported for coeffs "
                                  "records")
            target[...] = coeffs.decode_record(data, crop_or_none(crop), target.shape[:2],
                                               bool(flip))
        else:
            target[...] = decode_pillow(data, crop_or_none(crop), target.shape[:2], bool(flip),
                                        orientation)
        if place is not None:  # the padding around the image, as the native path writes it
            slot[:top], slot[top + height:] = fill, fill
            slot[top:top + height, :left], slot[top:top + height, left + width:] = fill, fill
        return None
    except (DecodeError, FastloaderError, TypeError) as exc:
        slot.fill(0)
        return str(exc)
