"""The records' codec hook of a pack's tasks: `--codec coeffs` encodes each JPEG record as a
coeffs record where its item (any source's sample) is prepared, in the worker.

Other images keep their bytes, and so does a JPEG the codec refuses (a progressive file whose
scans stop early, which libjpeg block-smooths): such a record stays JPEG, as `recode` keeps it.
Only the records (a v2 dataset's first image field) are encoded; further image fields keep
their bytes. A "jpeg" pack never comes here, so its records are the bytes they always were.
"""

from __future__ import annotations

import zlib

from fastloader.decode import coeffs
from fastloader.errors import DecodeError
from fastloader.format.manifest import Codec
from fastloader.pack.sources.validate import Prepared


def encode_record(prepared: Prepared, codec: str) -> Prepared:
    """prepared with its JPEG record in codec ("coeffs": the coefficients, losslessly, and
    their crc32), or as it is (any other record, a refused item, a JPEG the codec refuses)."""
    if codec != "coeffs" or prepared.data is None or prepared.codec != Codec.JPEG:
        return prepared
    try:
        record = coeffs.encode(prepared.data)
    except DecodeError:  # a kind records do not hold: decoded as the JPEG it is
        return prepared
    return prepared._replace(data=record, codec=int(Codec.COEFFS), crc32=zlib.crc32(record))

