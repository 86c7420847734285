"""decode_views_into's arguments refused before any decode, each naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from fastloader.decode.decode import BatchDecoder
from fastloader.decode.pixels import PixelProgram
from fastloader.errors import FastloaderError, InvalidArgumentError, InvalidTypeError

pytestmark = pytest.mark.native_neutral

N = 2
RECORDS = [b"\xff\xd8\xff never decoded"] * N  # every case is refused before a decode


def outs(*sizes: tuple[int, int]) -> list[np.ndarray]:
    return [np.zeros((N, h, w, 3), np.uint8) for h, w in sizes]


def call(**overrides: object) -> list[str | None]:
    arguments: dict[str, object] = {
        "records": RECORDS, "crops": np.zeros((N, 2, 4), np.int32),
        "flips": np.zeros((N, 2), bool), "outs": outs((8, 8), (4, 6))}
    arguments.update(overrides)
    with BatchDecoder(1, "pillow") as decoder:
        return decoder.decode_views_into(**arguments)  # type: ignore[arg-type]


def program(rows: int, ops: int = 1) -> PixelProgram:
    return PixelProgram(np.zeros((rows, ops), np.int32), np.zeros((rows, ops, 8), np.float32))


@pytest.mark.parametrize(("overrides", "error", "named"), [
    ({"crops": np.zeros((N, 3, 4), np.int32)}, InvalidArgumentError, "crops="),
    ({"crops": np.zeros((N + 1, 2, 4), np.int32)}, InvalidArgumentError, "crops="),
    ({"crops": np.zeros((N, 2, 3), np.int32)}, InvalidArgumentError, "crops="),
    ({"flips": np.zeros((N, 3), bool)}, InvalidArgumentError, "flips="),
    ({"flips": np.zeros(N, bool)}, InvalidArgumentError, "flips="),
    ({"outs": []}, InvalidArgumentError, "outs="),
    ({"outs": np.zeros((N, 8, 8, 3), np.uint8)}, InvalidTypeError, "outs must"),
    ({"outs": [np.zeros((N, 8, 8, 3), np.uint8), "x"]}, InvalidTypeError, "outs[1] must"),
    ({"outs": [*outs((8, 8)), np.zeros((N + 1, 4, 6, 3), np.uint8)]}, InvalidArgumentError,
     "outs[1]="),
    ({"outs": [*outs((8, 8)), np.zeros((N, 4, 6, 3), np.float32)]}, InvalidArgumentError,
     "outs[1]="),
    ({"outs": [*outs((8, 8)), np.zeros((N, 6, 4, 3), np.uint8).transpose(0, 2, 1, 3)]},
     InvalidArgumentError, "outs[1]="),
    ({"outs": [np.zeros((N, 8, 8, 3), np.uint8)] * 2}, InvalidArgumentError, "outs[1]="),
    ({"planars": [None]}, InvalidArgumentError, "planars="),
    ({"planars": [None, [[1]]]}, InvalidTypeError, "planars[1] must"),
    ({"planars": [np.zeros((N, 3, 8, 9), np.float32), None]}, InvalidArgumentError,
     "planars[0]="),
    ({"planars": [None, np.zeros((N, 3, 4, 6), np.float64)]}, InvalidArgumentError,
     "planars[1]="),
    ({"scale": (1.0, 1.0, 1.0)}, InvalidArgumentError, "scale="),
    ({"planars": [None, np.zeros((N, 3, 4, 6), np.uint8)], "shift": (1, 2, 3)},
     InvalidArgumentError, "scale="),
    ({"planars": [np.zeros((N, 3, 8, 8), np.float32), None], "scale": (1.0, 2.0)},
     InvalidArgumentError, "scale="),
    ({"programs": [None]}, InvalidArgumentError, "programs="),
    ({"programs": [program(N + 1), None]}, InvalidArgumentError, "programs[0]="),
    ({"programs": [None, object()]}, InvalidTypeError, "programs[1] must"),
    ({"orientations": [1, 9]}, InvalidArgumentError, "orientations="),
    ({"tiles": (np.zeros((N, 9)), np.zeros(0), np.zeros((N + 1, 2)))}, InvalidArgumentError,
     "tiles="),
    ({"records": b"one record"}, InvalidTypeError, "records must"),
    ({"places": np.zeros((N, 4), np.int32)}, InvalidArgumentError, "ResizeFit"),
], ids=lambda value: None)
def test_refused_naming_the_argument(overrides: dict[str, object], error: type[Exception],
                                     named: str) -> None:
    with pytest.raises(error) as caught:
        call(**overrides)
    assert named in str(caught.value)


def test_a_planar_sharing_memory_with_another_view_is_refused() -> None:
    views = outs((8, 8), (8, 8))
    planar = np.zeros((N, 3, 8, 8), np.uint8)
    with pytest.raises(InvalidArgumentError, match=r"planars\[1\]"):
        call(outs=views, planars=[planar, planar])
    with pytest.raises(InvalidArgumentError, match=r"planars\[0\]"):
        call(outs=views, planars=[views[1].reshape(N, 3, 8, 8), None])


def test_a_closed_decoder_refuses() -> None:
    decoder = BatchDecoder(1, "pillow")
    decoder.close()
    with pytest.raises(FastloaderError, match="closed"):
        decoder.decode_views_into(RECORDS, np.zeros((N, 1, 4)), np.zeros((N, 1)), outs((4, 4)))
