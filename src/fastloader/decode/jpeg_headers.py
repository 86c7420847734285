"""A JPEG's header segments walked as Pillow walks them, for decoders stricter than Pillow (DALI).

Pillow (the reference backend) reads a JPEG's markers up to SOS leniently: it skips stray bytes
between segments, escaped 0xFF00 pairs and 0xFFFF padding, and a segment whose length is short
of its data leaves the rest as stray bytes, skipped too. DALI's own JPEG parser refuses all of
these ("Invalid marker"), while it accepts JFIF and Adobe segments too short for Pillow to read.
`pillow_framed` mirrors Pillow's walk: it refuses what Pillow refuses at the header, and gives
back the same file re-framed with only the segments Pillow read (stray bytes dropped), which a
strict parser decodes to the same pixels. Only the header is read, never the entropy data.
"""

from __future__ import annotations

from fastloader.decode.pillow import is_jpeg
from fastloader.decode.record import Record
from fastloader.errors import DecodeError

_SOS = 0xDA
# Markers Pillow reads without a length (SOFn 0xC8, RSTn, SOI, EOI, JPGn 0xF0-0xFD): it moves
# on to the next byte. Every other marker from 0xC0 to 0xFE has a length and a payload.
_BARE = frozenset({0xC8, *range(0xD0, 0xDA), *range(0xF0, 0xFE)})


def _length(data: Record, at: int, marker: int) -> int:
    """The payload length of the segment whose length field is at `at`, checked in bounds."""
    if at + 2 > len(data):
        raise DecodeError(f"the JPEG ends inside the 0xFF{marker:02X} segment's length")
    n = (data[at] << 8 | data[at + 1]) - 2
    if n < 0 or at + 2 + n > len(data):
        raise DecodeError(f"the JPEG's 0xFF{marker:02X} segment runs past the end of the file")
    return n


def _check_app(marker: int, payload: Record) -> None:
    """Pillow's APP handler reads JFIF's and Adobe's version fields unconditionally."""
    head = bytes(payload[:5])
    if marker == 0xE0 and head.startswith(b"JFIF") and len(payload) < 7:
        raise DecodeError(f"its JFIF APP0 segment has {len(payload)} bytes, too short to hold "
                          "the JFIF version")
    if marker == 0xEE and head == b"Adobe" and len(payload) < 7:
        raise DecodeError(f"its Adobe APP14 segment has {len(payload)} bytes, too short to hold "
                          "the Adobe version")


def pillow_framed(data: Record) -> Record:
    """`data` re-framed as Pillow reads its header: the segments up to SOS without the bytes
    Pillow skips between them, then the scan unchanged. `data` itself when nothing was skipped.

    Raises:
        DecodeError: Pillow refuses the header (not a JPEG, no marker where one must be, a JFIF
            or Adobe segment too short, the file ends inside the header).
    """
    if not is_jpeg(data):
        raise DecodeError("not a JPEG file (it does not start with FF D8 FF)")
    kept: list[tuple[int, int]] = []  # (start, end) of each segment Pillow read
    skipped = False
    at = 2
    while True:
        if at >= len(data):
            raise DecodeError("the JPEG ends before its start-of-scan segment")
        if data[at] != 0xFF:
            at, skipped = at + 1, True  # Pillow: "skip non-0xFF junk"
            continue
        if at + 1 >= len(data):
            raise DecodeError("the JPEG ends before its start-of-scan segment")
        marker = data[at + 1]
        if marker == 0xFF:  # padding before a marker: move on by one byte
            at, skipped = at + 1, True
        elif marker == 0x00 or marker in _BARE:  # an escaped 0xFF, or a marker with no
            # length: Pillow skips the two bytes
            at, skipped = at + 2, True
        elif marker >= 0xC0:
            n = _length(data, at + 2, marker)
            end = at + 4 + n
            if 0xE0 <= marker <= 0xEF:
                _check_app(marker, data[at + 4 : end])
            if marker == _SOS:
                return _reframed(data, kept, at) if skipped else data
            kept.append((at, end))
            at = end
        else:
            raise DecodeError(f"no JPEG marker where one must be (0xFF{marker:02X} at byte "
                              f"{at})")


def _reframed(data: Record, kept: list[tuple[int, int]], sos: int) -> bytes:
    return b"".join([b"\xff\xd8", *(data[a:b] for a, b in kept), data[sos:]])
