"""A small baseline JPEG writer for tests: any sampling factors and restart intervals.

Pillow writes only 4:4:4, 4:2:2 and 4:2:0; the coeffs codec must also meet 4:4:0, 4:1:1 and
other factor sets, so this writes them from numpy (float DCT, flat Huffman codes: every DC
category 4 bits, every AC symbol 8 bits; valid JPEG that libjpeg decodes like any other).
"""

from __future__ import annotations

import numpy as np

_ZIGZAG = np.array([
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27,
    20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58,
    59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63])
_AC_SYMBOLS = [0x00, 0xF0] + [(run << 4) | size for run in range(16) for size in range(1, 11)]
_AC_CODE = {s: i for i, s in enumerate(_AC_SYMBOLS)}  # canonical: every symbol 8 bits long
_DCT = np.array([[np.sqrt((1 if k == 0 else 2) / 8) * np.cos((2 * n + 1) * k * np.pi / 16)
                  for n in range(8)] for k in range(8)])


class _Bits:
    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value: int, length: int) -> None:
        for i in range(length - 1, -1, -1):
            self.acc = (self.acc << 1) | ((value >> i) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)  # byte stuffing
                self.acc = self.n = 0

    def flush(self) -> None:
        while self.n:
            self.put(1, 1)  # pad with ones


def _category(v: int) -> int:
    return int(abs(v)).bit_length()


def _put_value(bits: _Bits, v: int, size: int) -> None:
    if size:
        bits.put(v if v >= 0 else v + (1 << size) - 1, size)


def _encode_block(bits: _Bits, zz: np.ndarray, pred: int) -> int:
    diff = int(zz[0]) - pred
    size = _category(diff)
    bits.put(size, 4)
    _put_value(bits, diff, size)
    run = 0
    last = max((k for k in range(1, 64) if zz[k]), default=0)
    for k in range(1, last + 1):
        v = int(zz[k])
        if not v:
            run += 1
            continue
        while run > 15:
            bits.put(_AC_CODE[0xF0], 8)
            run -= 16
        size = _category(v)
        bits.put(_AC_CODE[(run << 4) | size], 8)
        _put_value(bits, v, size)
        run = 0
    if last < 63:
        bits.put(_AC_CODE[0x00], 8)
    return int(zz[0])


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def _plane_blocks(plane: np.ndarray, rows: int, cols: int, q: np.ndarray) -> np.ndarray:
    """Quantized zigzag coefficients of a plane padded (edge-replicated) to rows x cols blocks."""
    h, w = plane.shape
    padded = np.pad(plane, ((0, rows * 8 - h), (0, cols * 8 - w)), mode="edge").astype(np.float64)
    blocks = padded.reshape(rows, 8, cols, 8).transpose(0, 2, 1, 3) - 128.0
    coef = np.einsum("ij,rcjk,lk->rcil", _DCT, blocks, _DCT)
    quant = np.clip(np.round(coef / q), -1023, 1023).astype(np.int32)
    return quant.reshape(rows, cols, 64)[:, :, _ZIGZAG]


def _ycc(rgb: np.ndarray) -> list[np.ndarray]:
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return [0.299 * r + 0.587 * g + 0.114 * b,
            -0.168736 * r - 0.331264 * g + 0.5 * b + 128,
            0.5 * r - 0.418688 * g - 0.081312 * b + 128]


def write_jpeg(pixels: np.ndarray, factors: tuple[tuple[int, int], ...] = ((2, 2), (1, 1), (1, 1)),
               restart: int = 0, quality_step: int = 6, ycck: bool = False) -> bytes:
    """A baseline JPEG of (H, W, 3) RGB, (H, W) grey or (H, W, 4) CMYK pixels (with an Adobe
    marker: transform 0, or 2 = YCCK when ycck); factors[i] = (h, v) per component."""
    grey = pixels.ndim == 2
    adobe = b""
    if grey:
        planes = [pixels.astype(np.float64)]
        factors = ((1, 1),)
    elif pixels.shape[2] == 4:
        cmyk = pixels.astype(np.float64)
        planes = [*(_ycc(cmyk[..., :3]) if ycck else [cmyk[..., i] for i in range(3)]),
                  cmyk[..., 3]]
        adobe = _segment(0xEE, b"Adobe" + bytes([0, 100, 0, 0, 0, 0, 2 if ycck else 0]))
    else:
        planes = _ycc(pixels.astype(np.float64))
    height, width = pixels.shape[:2]
    hmax = max(h for h, _ in factors)
    vmax = max(v for _, v in factors)
    mcu_cols, mcu_rows = -(-width // (8 * hmax)), -(-height // (8 * vmax))
    qtables = [np.full((8, 8), quality_step, np.float64),
               np.full((8, 8), 2 * quality_step, np.float64)]
    coeffs = []
    for i, (plane, (h, v)) in enumerate(zip(planes, factors, strict=True)):
        sub = plane[:: vmax // v, :: hmax // h]  # nearest-sample downsampling is enough here
        sub = sub[: -(-height * v // vmax), : -(-width * h // hmax)]
        rows, cols = (mcu_rows * v, mcu_cols * h) if not grey else (-(-height // 8), -(-width // 8))
        coeffs.append(_plane_blocks(np.clip(np.round(sub), 0, 255), rows, cols, qtables[min(i, 1)]))
    out = bytearray(b"\xff\xd8") + adobe
    for t, q in enumerate(qtables):
        out += _segment(0xDB, bytes([t]) + bytes(q.astype(np.uint8).ravel()[_ZIGZAG]))
    sof = bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([len(planes)])
    for i, (h, v) in enumerate(factors):
        sof += bytes([i + 1, (h << 4) | v, min(i, 1)])
    out += _segment(0xC0, sof)
    for t in range(2):
        out += _segment(0xC4, bytes([t]) + bytes([0, 0, 0, 12] + [0] * 12) + bytes(range(12)))
        ac_counts = bytes([0] * 7 + [len(_AC_SYMBOLS)] + [0] * 8)
        out += _segment(0xC4, bytes([0x10 | t]) + ac_counts + bytes(_AC_SYMBOLS))
    if restart:
        out += _segment(0xDD, restart.to_bytes(2, "big"))
    sos = bytes([len(planes)]) + b"".join(bytes([i + 1, (min(i, 1) << 4) | min(i, 1)])
                                          for i in range(len(planes)))
    out += _segment(0xDA, sos + bytes([0, 63, 0]))
    bits = _Bits()
    preds = [0] * len(planes)
    units = [(r, c) for r in range(coeffs[0].shape[0]) for c in range(coeffs[0].shape[1])] if grey \
        else [(r, c) for r in range(mcu_rows) for c in range(mcu_cols)]
    for n, (r, c) in enumerate(units):
        if restart and n and n % restart == 0:
            bits.flush()
            bits.out += bytes([0xFF, 0xD0 + (n // restart - 1) % 8])
            preds = [0] * len(planes)
        for i, (h, v) in enumerate(factors):
            for yy in range(1 if grey else v):
                for xx in range(1 if grey else h):
                    blk = coeffs[i][r if grey else r * v + yy, c if grey else c * h + xx]
                    preds[i] = _encode_block(bits, blk, preds[i])
    bits.flush()
    return bytes(out + bits.out + b"\xff\xd9")


def first_scans(data: bytes, scans: int) -> bytes:
    """A progressive JPEG cut after its first `scans` scans (then EOI): a file whose scans leave
    coefficient bits unsent, which libjpeg decodes with block smoothing. In entropy data 0xFF
    is always followed by 0x00 or a restart marker, so b"\\xff\\xda" finds only real SOS markers."""
    at, found = 0, 0
    while True:
        at = data.index(b"\xff\xda", at + 1)
        found += 1
        if found > scans:
            return data[:at] + b"\xff\xd9"
