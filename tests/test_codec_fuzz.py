"""Thousands of mutated and truncated coeffs records, decoded in a child process: every failure
a DecodeError (or a BatchDecoder error string), never a crash."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.native, pytest.mark.wheel]

# Runs in the child: a crash (segfault, abort) there fails the test instead of pytest.
CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from imagegen import encode, photo_like
    from jpeg_writer import write_jpeg
    from mutations import mutate as mutated
    from fastloader.decode import coeffs
    from fastloader.decode.decode import BatchDecoder, decode
    from fastloader.errors import DecodeError, InvalidArgumentError

    rng = np.random.default_rng(int(sys.argv[2]))
    count = int(sys.argv[3])
    jpegs = [
        encode(photo_like(48, 64, 1), "JPEG", "RGB", quality=90),
        encode(photo_like(40, 72, 2), "JPEG", "RGB", quality=90, progressive=True, subsampling=1),
        encode(photo_like(33, 47, 3), "JPEG", "RGB", quality=90, subsampling=0),
        encode(photo_like(24, 40, 4), "JPEG", "L", quality=85),
        write_jpeg(photo_like(29, 35, 5), ((1, 2), (1, 1), (1, 1)), restart=2),
        encode(photo_like(24, 32, 6), "JPEG", "CMYK", quality=85, progressive=True),
        write_jpeg(np.concatenate([photo_like(21, 27, 7)] * 2, axis=2)[..., :4],
                   ((2, 2), (1, 1), (1, 1), (2, 2)), ycck=True),
    ]
    bases = [coeffs.encode(j, seg_mcus=1 + i % 3) for i, j in enumerate(jpegs)]

    def mutate(data):  # the header: size, components, factors, layout, segment table
        return mutated(data, rng, keep=6, header_end=20 + 130 * data[16 % len(data)] + 64,
                       bit_flips_from=1 / 3)

    records = [mutate(bases[i % len(bases)]) for i in range(count)]
    decoded = failed = 0
    calls = (  # each tried on its own, so a damaged record reaches every path
        lambda d: decode(d),
        lambda d: decode(d, crop=(1, 2, 9, 11), size=(5, 7), flip=True),
        lambda d: decode(d, size=(1, 1)),  # DCT-scaled: 1/8, 1/4, 1/2 as the sizes allow
        lambda d: decode(d, size=(2, 3), flip=True),
        lambda d: decode(d, size=(5, 6)),
        lambda d: decode(d, crop=(3, 2, 18, 19), size=(3, 3)),
    )
    for data in records[: count // 4]:
        ok = True
        for call in calls:
            try:
                call(data)
            except (DecodeError, InvalidArgumentError):  # the latter: a crop outside a damaged size
                ok = False
        decoded += ok
        failed += not ok
    batch = records[count // 4 :]
    out = np.empty((len(batch), 16, 16, 3), np.uint8)
    crops = np.tile(np.array([[2, 3, 20, 30]], np.int32), (len(batch), 1))
    crops[::3] = 0  # whole image for every third record
    flips = np.arange(len(batch)) % 2 == 0
    small = np.empty((len(batch), 2, 3, 3), np.uint8)  # whole images scaled 1/2 to 1/8
    with BatchDecoder(num_threads=2) as decoder:
        for start in range(0, len(batch), 64):
            sl = slice(start, start + 64)
            scaled = decoder.decode_into(batch[sl], crops[sl] * 0, flips[sl], small[sl])
            errors = decoder.decode_into(batch[sl], crops[sl], flips[sl], out[sl])
            for k, error in enumerate(scaled):
                assert error is None or (isinstance(error, str) and not small[start + k].any())
            for k, error in enumerate(errors):
                if error is None:
                    decoded += 1
                else:
                    failed += 1
                    assert isinstance(error, str) and error
                    assert not out[start + k].any()
    print(json.dumps({"decoded": decoded, "failed": failed}))
    """
)


def test_mutated_records_never_crash_the_process() -> None:
    tests_dir = str(Path(__file__).parent)
    count = 6000
    result = subprocess.run(
        [sys.executable, "-c", CHILD, tests_dir, "30", str(count)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["decoded"] + summary["failed"] == count
    assert summary["failed"] > count // 4  # the mutations really do break records
    assert summary["decoded"] > 0
