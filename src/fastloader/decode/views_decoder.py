"""BatchDecoder's views face: decode_views_into, natively on the C++ pool or through Pillow,
and the count of record decodes that shows views share one decode a sample."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from fastloader.decode.batch_args import check_tiles, three
from fastloader.decode.pixels import PixelProgram
from fastloader.decode.views import ViewBatch, check_views
from fastloader.decode.views_pillow import DecodeCount, decode_views_pillow
from fastloader.errors import FastloaderError, invalid_argument

if TYPE_CHECKING:
    import torch

    from fastloader.decode.tiles import TileBatch

__all__ = ["ViewsDecoding"]

T = TypeVar("T")


class ViewsDecoding:
    """What BatchDecoder adds for views; it gives the pool (`_core`, None on the Pillow path),
    `_closed`, the Pillow path's `_map_samples` and the `_decoded` count."""

    _core: Any
    _closed: bool
    _decoded: DecodeCount

    def _map_samples(self, one: Callable[[int], T], n: int) -> list[T]:
        raise NotImplementedError  # BatchDecoder's: its Pillow threads

    @property
    def records_decoded(self) -> int:
        """Records this decoder has read and entropy-decoded so far, on either path: one a
        sample of decode_into, and one a sample of decode_views_into however many views it has."""
        native = 0 if self._core is None else int(self._core.records_decoded)
        return native + self._decoded.value

    def decode_views_into(
        self,
        records: Sequence[object],
        crops: npt.ArrayLike,
        flips: npt.ArrayLike,
        outs: Sequence[np.ndarray | torch.Tensor],
        tiles: TileBatch | tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        *,
        programs: Sequence[PixelProgram | None] | None = None,
        planars: Sequence[np.ndarray | torch.Tensor | None] | None = None,
        scale: npt.ArrayLike | None = None,
        shift: npt.ArrayLike | None = None,
        orientations: npt.ArrayLike | None = None,
        places: npt.ArrayLike | None = None,
    ) -> list[str | None]:
        """Decode each record once and write V views of it: crops[k, v] resized to outs[v]'s
        H x W, mirrored if flips[k, v], programs[v] applied, made channel-first into planars[v].

        Each sample's record is read and entropy-decoded once, over the union of its views'
        boxes, at the largest DCT scale every view allows (the view that needs the most
        pixels decides); each view is then resized from that decode with Pillow's bilinear
        filter, as decode_into resizes one crop, so a view's pixels are decode_into's for its
        crop alone (the same bytes where both take the same DCT scale, within a level where the
        shared decode is finer). A sample that fails is zero-filled in every view and reported.

        Args:
            records: N encoded images (bytes-like each): JPEG, tiled JPEG, coeffs records or
                any format Pillow reads.
            crops: (N, V, 4) ints: row [k, v] is view v's box (top, left, height, width) of
                record k ([0, 0, 0, 0]: the whole image), as decode_into's crops.
            flips: (N, V) booleans.
            outs: V C-contiguous uint8 arrays (or CPU tensors), view v's (N, H_v, W_v, 3);
                each view has its own size, and its own memory.
            tiles: the batch's restart-tile tables, as decode_into's: a tiled record's union
                is decoded from only the segments it needs.
            programs: None, or V entries each a PixelProgram (fastloader.decode.pixels) of N
                rows or None: view v's pixel ops, run on each decoded sample in the decode
                worker, before the channel-first copy.
            planars: None, or V entries each None or an (N, 3, H_v, W_v) float32 or uint8
                array (or CPU tensor) that also receives view v channel-first, as
                decode_into's planar.
            scale: 3 floats, float32 planars only: planar = out * scale[c] + shift[c].
            shift: 3 floats, float32 planars only.
            orientations: N EXIF orientations (1..8; None: all 1), as decode_into's: every
                view's box is a box of the turned image.
            places: refused (only None): a view's crop fills its output, and a letterbox
                (ResizeFit's places, decode_into's `places`) is not a view's.

        Returns:
            list: one entry per sample, None on success or the error message.

        Raises:
            FastloaderError: the decoder was closed.
            InvalidArgumentError: shapes, lengths or dtypes disagree (crops' V against outs'),
                there is no view, two views' outputs share memory, or places are given.
            InvalidTypeError: records or outs is not a sequence, or an entry is not an array.
        """
        if self._closed:
            raise FastloaderError("this BatchDecoder was closed; create a new one")
        if places is not None:
            raise invalid_argument(
                "places", "letterbox rectangles", "views do not letterbox (ResizeFit): each "
                "view's crop fills its output", "Give the views crops that fill them "
                "(RandomResizedCrop, Resize + CenterCrop), or decode a letterbox with "
                "decode_into(places=).")
        batch = check_views(records, crops, flips, outs, planars, programs, scale, shift,
                            orientations)
        tile_arrays = check_tiles(tiles, len(records))
        if self._core is None:
            return self._map_samples(
                lambda k: decode_views_pillow(records[k], k, batch, self._decoded), len(records))
        return self._decode_views_native(records, batch, tile_arrays)

    def _decode_views_native(self, records: Sequence[object], batch: ViewBatch,
                             tile_arrays: tuple[np.ndarray | None, ...]) -> list[str | None]:
        headers, offsets, spans = tile_arrays
        errors, fallback = self._core.decode_views_into(  # scale: check_views saw a float32 planar
            records, batch.crops, batch.flips, list(batch.outs), tile_headers=headers,
            tile_offsets=offsets, tile_spans=spans, planars=list(batch.planars),
            scale=None if batch.scale is None else three(batch.scale),
            shift=None if batch.shift is None else three(batch.shift),
            orientations=batch.turns,
            program_codes=[None if p is None else p.codes for p in batch.programs],
            program_params=[None if p is None else p.params for p in batch.programs])
        for k in fallback:  # records libjpeg does not read (PNG, WebP ...): Pillow, GIL held
            errors[k] = decode_views_pillow(records[k], k, batch, self._decoded)
        return list(errors)
