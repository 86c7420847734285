"""Thousands of mutated and truncated JPEGs, decoded in a child process: never a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Runs in the child: a crash (segfault, abort, exit()) there fails the test instead of pytest.
CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from jpeg_corpus import photo_jpeg, encode_jpeg
    from imagegen import photo_like
    from mutations import mutate as mutated
    from fastloader.decode.decode import BatchDecoder, decode
    from fastloader.errors import DecodeError

    rng = np.random.default_rng(int(sys.argv[2]))
    count = int(sys.argv[3])
    bases = [
        photo_jpeg(48, 64, 1),
        photo_jpeg(40, 72, 2, progressive=True),
        photo_jpeg(33, 47, 3, subsampling=0),
        encode_jpeg(photo_like(24, 40, 4), "L", quality=85),
        encode_jpeg(photo_like(24, 32, 5), "CMYK", quality=85, progressive=True),
    ]

    def mutate(data):  # markers, tables and the frame header lie in the first 200 bytes
        return mutated(data, rng, header_end=200)

    records = [mutate(bases[i % len(bases)]) for i in range(count)]
    decoded = failed = 0
    for data in records[: count // 4]:
        try:
            decode(data)
            decoded += 1
        except DecodeError:
            failed += 1
    batch = records[count // 4 :]
    out = np.empty((len(batch), 16, 16, 3), np.uint8)
    crops = np.tile(np.array([[2, 3, 20, 30]], np.int32), (len(batch), 1))
    crops[::3] = 0  # whole image for every third record
    flips = np.arange(len(batch)) % 2 == 0
    with BatchDecoder(num_threads=2) as decoder:
        for start in range(0, len(batch), 64):
            sl = slice(start, start + 64)
            errors = decoder.decode_into(batch[sl], crops[sl], flips[sl], out[sl])
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


def test_mutated_jpegs_never_crash_the_process():
    tests_dir = str(Path(__file__).parent)
    count = 6000 if os.environ.get("FASTLOADER_DISABLE_NATIVE", "") in ("", "0") else 3000
    result = subprocess.run(
        [sys.executable, "-c", CHILD, tests_dir, "11", str(count)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["decoded"] + summary["failed"] == count
    assert summary["failed"] > count // 10  # the mutations really do break files
    assert summary["decoded"] > 0
