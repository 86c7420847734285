"""Thousands of mutated and truncated FLAC and WAV clips decoded by the extension in a child
process: every result decoded, left to libsndfile or refused with a message; never a crash, a
hang or a read past the bytes (the child runs each clip from a copy that ends where it ends)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.native, pytest.mark.wheel]
pytest.importorskip("soundfile", reason="soundfile (the audio extra) is a test dependency")

# Runs in the child: a crash (segfault, abort) there fails the test instead of pytest.
CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from audiogen import encode, signal, stereo
    from mutations import mutate as mutated
    from fastloader.decode import audio_native
    from fastloader.errors import DecodeError

    rng = np.random.default_rng(int(sys.argv[2]))
    count = int(sys.argv[3])
    core = audio_native.core()
    bases = [
        encode(signal(16000, 0.6, 1, 1), 16000, "FLAC", "PCM_16"),
        encode(stereo("mid/side", 8000, 1.1), 8000, "FLAC", "PCM_16"),
        encode(stereo("left/side", 8000, 0.7), 8000, "FLAC", "PCM_24"),
        encode(signal(22050, 0.4, 3, 2), 22050, "FLAC", "PCM_S8"),
        encode(signal(8000, 0.3, 2, 3), 8000, "WAV", "PCM_16"),
        encode(signal(8000, 0.3, 1, 4), 8000, "WAVEX", "PCM_24"),
        encode(signal(8000, 0.2, 2, 5), 8000, "WAV", "FLOAT"),
    ]

    def mutate(data):  # STREAMINFO, seek table, chunk sizes, the first frame: 120 bytes
        return mutated(data, rng, header_end=120, splice=300, bit_flips_from=1 / 4)

    seen = {0: 0, 1: 0, 2: 0}
    for i in range(count):
        data = mutate(bases[i % len(bases)])
        status, rate, channels, frames, why = core.audio_info(data)
        assert status in seen and (status == 0 or why), (status, why)
        start = int(rng.integers(0, 20000))
        n = int(rng.integers(0, 20000))
        mono = bool(rng.integers(0, 2))
        out = np.empty((1 if mono else max(1, min(channels, 4)), n), np.float32)
        status, got, _, _, why = core.audio_decode(data, start, n, out, mono)
        assert status in seen and 0 <= got <= n and (status == 0 or why), (status, got, why)
        seen[status] += 1
        try:
            audio_native.decode(data, start, n)
        except DecodeError:
            pass
    print(json.dumps(seen))
    """
)


def test_mutated_clips_never_crash_the_process() -> None:
    count = 4000
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(__file__).parent), "31", str(count)],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert sum(seen.values()) == count
    assert seen["2"] > count // 6  # the mutations really do damage clips (~20% refused)
    assert seen["0"] > count // 5
