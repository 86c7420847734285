"""BatchDecoder.decode_views_into: every view of a sample from one decode of its record, equal
to decode_into of that view's crop alone, for JPEG, tiled and coeffs records, natively and
through Pillow."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fastloader.decode.decode import BatchDecoder
from imagegen import encode
from jpeg_corpus import corpus, photo_jpeg

pytestmark = pytest.mark.wheel

MARGIN = 3  # csrc/jpeg.cpp's kDctMargin: a 1/d scale needs the crop d * 3 times the output


def own_denominator(box: np.ndarray, size: tuple[int, int]) -> int:
    """The DCT scale denominator decode_into takes for one crop and output (jpeg.cpp's rule)."""
    for d in (8, 4, 2):
        if box[2] >= size[0] * d * MARGIN and box[3] >= size[1] * d * MARGIN:
            return d
    return 1


def views_batch(records: list[bytes], crops: np.ndarray, flips: np.ndarray,
                sizes: list[tuple[int, int]], backend: str, threads: int = 2, **options: object
                ) -> tuple[list[np.ndarray], list[str | None], int]:
    """(outs, errors, records decoded by the call) of one decode_views_into call."""
    n = len(records)
    outs = [np.full((n, h, w, 3), 7, np.uint8) for h, w in sizes]
    with BatchDecoder(threads, backend) as decoder:
        errors = decoder.decode_views_into(records, crops, flips, outs, **options)
        decodes = decoder.records_decoded
    return outs, errors, decodes


def alone(records: list[bytes], crops: np.ndarray, flips: np.ndarray, size: tuple[int, int],
          backend: str, **options: object) -> tuple[np.ndarray, list[str | None]]:
    """decode_into of one view's crops alone."""
    out = np.full((len(records), *size, 3), 9, np.uint8)
    with BatchDecoder(2, backend) as decoder:
        errors = decoder.decode_into(records, crops, flips, out, **options)
    return out, errors


def mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


# A large image, so views take different DCT scales alone: (crop box, output size) a view.
BIG = (1500, 1600)
DINO_LIKE = [((20, 30, 1450, 1500), (224, 224)),  # 1/2 alone
             ((100, 200, 1200, 1250), (96, 96)),  # 1/4 alone
             ((700, 900, 300, 320), (96, 96)),  # 1/1 alone: the union decodes at full scale
             ((0, 0, 0, 0), (64, 80))]  # the whole image, 1/4 alone
COARSE = DINO_LIKE[:2]  # shared scale 1/2: the 224 view is decode_into's bytes


def big_records(n: int) -> list[bytes]:
    return [photo_jpeg(*BIG, seed=40 + k) for k in range(n)]


def planned(n: int, views: list, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    crops = np.array([[box for box, _ in views]] * n, np.int32)
    return crops, rng.random((n, len(views))) < 0.5


def check_against_alone(records: list[bytes], views: list, backend: str, **options: object) -> None:
    crops, flips = planned(len(records), views, seed=1)
    sizes = [size for _, size in views]
    outs, errors, _ = views_batch(records, crops, flips, sizes, backend, **options)
    assert errors == [None] * len(records)
    shared = min(own_denominator(np.array(box) if box[2] else np.array((0, 0, *BIG)), size)
                 for box, size in views)
    for v, (box, size) in enumerate(views):
        want, want_errors = alone(records, crops[:, v], flips[:, v], size, backend, **options)
        assert want_errors == [None] * len(records)
        full = np.array(box) if box[2] else np.array((0, 0, *BIG))
        if backend == "pillow" or own_denominator(full, size) == shared:
            np.testing.assert_array_equal(outs[v], want, err_msg=f"view {v}")
        else:  # the shared decode is finer than the view's own: within a level
            assert mae(outs[v], want) <= 1.0, (v, mae(outs[v], want))


@pytest.mark.parametrize("views", [DINO_LIKE, COARSE], ids=["mixed-scales", "shared-half"])
@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_jpeg_views_equal_decode_into_alone(views: list, backend: str) -> None:
    check_against_alone(big_records(3), views, backend)


@pytest.mark.native
@pytest.mark.parametrize("views", [DINO_LIKE, COARSE], ids=["mixed-scales", "shared-half"])
def test_tiled_views_equal_decode_into_alone(views: list) -> None:
    from fastloader.decode import tiles

    tiled = [tiles.repack(data) for data in big_records(3)]
    batch = tiles.TileBatch.from_tables([t.table for t in tiled if t is not None])
    check_against_alone([t.data for t in tiled if t is not None], views, "native", tiles=batch)


@pytest.mark.native
@pytest.mark.parametrize("views", [DINO_LIKE, COARSE], ids=["mixed-scales", "shared-half"])
def test_coeffs_views_equal_decode_into_alone(views: list) -> None:
    from fastloader.decode import coeffs

    check_against_alone([coeffs.encode(data) for data in big_records(3)], views, "native")


@pytest.mark.native
def test_coeffs_views_through_pillow_are_one_full_scale_decode() -> None:
    # The Pillow path decodes a coeffs record's union at full scale once (the native codec,
    # unscaled), then resizes each view with Pillow: within a level of decode_into's views.
    from fastloader.decode import coeffs

    records = [coeffs.encode(data) for data in big_records(2)]
    crops, flips = planned(2, DINO_LIKE, seed=2)
    sizes = [size for _, size in DINO_LIKE]
    outs, errors, decodes = views_batch(records, crops, flips, sizes, "pillow")
    assert errors == [None, None] and decodes == 2
    for v, size in enumerate(sizes):
        want, _ = alone(records, crops[:, v], flips[:, v], size, "auto")
        assert mae(outs[v], want) <= 1.0, (v, mae(outs[v], want))


# A planted pattern: a 4 x 4 grid of flat blocks, each its own colour.
GRID, BLOCK = 4, (96, 128)
COLOURS = np.array([[(37 * i + 60 * j) % 256, (90 + 53 * i) % 256, (200 - 45 * j) % 256]
                    for i in range(GRID) for j in range(GRID)], np.uint8)


def grid_jpeg() -> bytes:
    pixels = np.zeros((GRID * BLOCK[0], GRID * BLOCK[1], 3), np.uint8)
    for b, colour in enumerate(COLOURS):
        i, j = divmod(b, GRID)
        pixels[i * BLOCK[0]:(i + 1) * BLOCK[0], j * BLOCK[1]:(j + 1) * BLOCK[1]] = colour
    return encode(pixels, "JPEG", quality=95, subsampling=0)


def block_box(b: int) -> tuple[int, int, int, int]:
    i, j = divmod(b, GRID)
    return i * BLOCK[0] + 10, j * BLOCK[1] + 10, BLOCK[0] - 20, BLOCK[1] - 20


def grid_records(codec: str) -> tuple[list[bytes], dict[str, object]]:
    data = grid_jpeg()
    if codec == "tiles":
        from fastloader.decode import tiles

        record = tiles.repack(data)
        assert record is not None
        return [record.data] * 4, {"tiles": tiles.TileBatch.from_tables([record.table] * 4)}
    if codec == "coeffs":
        from fastloader.decode import coeffs

        return [coeffs.encode(data)] * 4, {}
    return [data] * 4, {}


@pytest.mark.parametrize("codec", [
    "jpeg", pytest.param("tiles", marks=pytest.mark.native),
    pytest.param("coeffs", marks=pytest.mark.native)])
@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_each_view_shows_its_own_region(codec: str, backend: str) -> None:
    records, options = grid_records(codec)
    views = 5
    blocks = np.array([[(3 * k + 7 * v) % 16 for v in range(views)] for k in range(4)])
    crops = np.array([[block_box(b) for b in row] for row in blocks], np.int32)
    sizes = [(24, 32), (40, 40), (16, 16), (60, 90), (8, 8)]
    outs, errors, _ = views_batch(records, crops, np.zeros((4, views), bool), sizes, backend,
                                  **options)
    assert errors == [None] * 4
    for k in range(4):
        for v in range(views):
            mean = outs[v][k].reshape(-1, 3).mean(0)
            distance = np.abs(COLOURS.astype(float) - mean).max(1)
            assert distance.argmin() == blocks[k, v] and distance.min() < 4, (k, v, mean)


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_a_flipped_view_is_the_mirror_of_the_unflipped_one(backend: str) -> None:
    records = [photo_jpeg(200, 300, seed=s) for s in (1, 2)]
    crops = np.array([[(10, 20, 150, 200)] * 2] * 2, np.int32)
    flips = np.array([[False, True], [True, False]])
    outs, errors, _ = views_batch(records, crops, flips, [(50, 60), (50, 60)], backend)
    assert errors == [None, None]
    np.testing.assert_array_equal(outs[1][0], outs[0][0][:, ::-1])
    np.testing.assert_array_equal(outs[0][1], outs[1][1][:, ::-1])
    assert not np.array_equal(outs[0][0], outs[1][0])


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_planar_views_are_their_outputs_channel_first(backend: str) -> None:
    records = [photo_jpeg(120, 160, seed=s) for s in range(3)]
    crops, flips = planned(3, [((5, 5, 100, 140), (32, 48)), ((0, 0, 0, 0), (20, 20)),
                               ((50, 60, 40, 50), (24, 24))], seed=3)
    sizes = [(32, 48), (20, 20), (24, 24)]
    planars = [np.zeros((3, 3, 32, 48), np.float32), None, np.zeros((3, 3, 24, 24), np.uint8)]
    scale, shift = np.array([1 / 58.0, 1 / 57.0, 1 / 57.5], np.float32), np.float32([-2, -1, 0])
    outs, errors, _ = views_batch(records, crops, flips, sizes, backend, planars=planars,
                                  scale=scale, shift=shift)
    assert errors == [None] * 3
    chw = outs[0].transpose(0, 3, 1, 2)
    want = (chw * scale[None, :, None, None]).astype(np.float32) + shift[None, :, None, None]
    np.testing.assert_array_equal(planars[0], want)
    np.testing.assert_array_equal(planars[2], outs[2].transpose(0, 3, 1, 2))


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_a_bad_record_fails_alone_in_every_view(backend: str) -> None:
    good = photo_jpeg(150, 200, seed=5)
    records = [good, b"\xff\xd8\xff\xdbbroken", good[: len(good) // 3], good, b"not an image"]
    crops = np.array([[(0, 0, 100, 100), (20, 30, 60, 80)]] * 5, np.int32)
    crops[3, 1] = (100, 150, 60, 80)  # leaves the 150 x 200 image: that sample alone fails
    planars = [np.zeros((5, 3, 16, 16), np.float32), None]
    outs, errors, _ = views_batch(records, crops, np.zeros((5, 2), bool), [(16, 16), (24, 24)],
                                  backend, planars=planars, shift=(1.0, 2.0, 3.0))
    assert errors[0] is None
    for k in (1, 2, 3, 4):
        assert isinstance(errors[k], str) and errors[k], k
        assert not outs[0][k].any() and not outs[1][k].any(), k
        np.testing.assert_array_equal(planars[0][k], np.float32([1, 2, 3])[:, None, None]
                                      * np.ones((3, 16, 16), np.float32))
    assert "does not fit" in errors[3]
    want, _ = alone([good], crops[:1, 1], [False], (24, 24), backend)
    np.testing.assert_array_equal(outs[1][0], want[0])


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_one_decode_a_sample_however_many_views(backend: str) -> None:
    records = [photo_jpeg(100, 120, seed=s) for s in range(4)]
    views = [((0, 0, 0, 0), (32, 32)), ((10, 10, 50, 50), (16, 16)), ((40, 60, 50, 50), (8, 8))]
    crops, flips = planned(4, views, seed=4)
    with BatchDecoder(2, backend) as decoder:
        outs = [np.zeros((4, *size, 3), np.uint8) for _, size in views]
        before = decoder.records_decoded
        assert decoder.decode_views_into(records, crops, flips, outs) == [None] * 4
        assert decoder.records_decoded - before == 4
        single = np.zeros((4, 16, 16, 3), np.uint8)
        decoder.decode_into(records, crops[:, 1], flips[:, 1], single)
        assert decoder.records_decoded - before == 8  # decode_into: one a sample too


@pytest.mark.native
@pytest.mark.parametrize("codec", ["tiles", "coeffs"])
def test_one_decode_a_sample_for_tiled_and_coeffs_records(codec: str) -> None:
    records, options = grid_records(codec)
    crops = np.array([[block_box(0), block_box(5), block_box(15)]] * 4, np.int32)
    _, errors, decodes = views_batch(records, crops, np.zeros((4, 3), bool),
                                     [(8, 8), (16, 16), (12, 12)], "native", **options)
    assert errors == [None] * 4 and decodes == 4


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_one_and_two_threads_give_the_same_bytes(backend: str) -> None:
    records = big_records(4)
    crops, flips = planned(4, DINO_LIKE, seed=5)
    sizes = [size for _, size in DINO_LIKE]
    one, _, _ = views_batch(records, crops, flips, sizes, backend, threads=1)
    two, _, _ = views_batch(records, crops, flips, sizes, backend, threads=2)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["auto", "pillow"])
def test_orientations_turn_every_view_as_decode_into_does(backend: str) -> None:
    records = [photo_jpeg(90, 140, seed=s) for s in range(4)]
    turns = np.array([6, 3, 1, 8], np.uint8)
    views = [((5, 10, 60, 70), (30, 20)), ((0, 0, 0, 0), (40, 40))]
    crops, flips = planned(4, views, seed=6)
    outs, errors, _ = views_batch(records, crops, flips, [s for _, s in views], backend,
                                  orientations=turns)
    assert errors == [None] * 4
    for v, (_, size) in enumerate(views):
        want, _ = alone(records, crops[:, v], flips[:, v], size, backend, orientations=turns)
        np.testing.assert_array_equal(outs[v], want)


def test_records_libjpeg_does_not_read_go_through_pillow() -> None:
    pixels = np.asarray(Image.open(__import__("io").BytesIO(photo_jpeg(80, 100, seed=9))))
    records = [encode(pixels, "PNG"), photo_jpeg(80, 100, seed=10)]
    views = [((10, 10, 50, 60), (20, 24)), ((0, 0, 0, 0), (16, 16))]
    crops, flips = planned(2, views, seed=7)
    outs, errors, decodes = views_batch(records, crops, flips, [s for _, s in views], "auto")
    assert errors == [None, None] and decodes == 2
    for v, (_, size) in enumerate(views):
        want, _ = alone(records, crops[:, v], flips[:, v], size, "auto")
        np.testing.assert_array_equal(outs[v], want)


@pytest.mark.native
def test_every_colour_space_subsampling_and_progression_matches_decode_into() -> None:
    # CMYK, YCCK, grey, 4:4:4 / 4:2:2 / 4:2:0, progressive: the union's column window, pads and
    # skipped rows must give each view decode_into's bytes (here every view's scale is 1/1 or
    # the shared one: a 400 x 560 image, views to outputs small enough for 1/2 alone or not).
    images = corpus(((400, 560),))
    records = [im.data for im in images]
    views = [((13, 17, 380, 530), (60, 80)),  # 1/2 alone: the shared scale
             ((200, 301, 90, 70), (30, 30)),  # 1/1 alone
             ((0, 0, 0, 0), (64, 90))]  # 1/2 alone
    crops, flips = planned(len(records), views, seed=8)
    outs, errors, _ = views_batch(records, crops, flips, [s for _, s in views], "native")
    assert errors == [None] * len(records)
    for v, (_, size) in enumerate(views):
        want, _ = alone(records, crops[:, v], flips[:, v], size, "native")
        for k, im in enumerate(images):
            assert mae(outs[v][k], want[k]) <= 1.0, (im.name, v)
    names = [im.name for im in images]
    np.testing.assert_array_equal(outs[1], alone(records, crops[:, 1], flips[:, 1], (30, 30),
                                                 "native")[0], err_msg=str(names))
