"""BatchDecoder: mixed batches, per-sample errors, thread-count independence, buffer handling."""

from __future__ import annotations

import numpy as np
import psutil
import pytest
import torch

from fastloader.decode.decode import BatchDecoder, decode
from fastloader.errors import FastloaderError, InvalidArgumentError, InvalidTypeError
from helpers import make_batch, pillow_reference
from jpeg_corpus import corpus, photo_jpeg

OUT = (48, 40)


pytestmark = pytest.mark.wheel


def test_batch_matches_single_decodes():
    records, crops, flips = make_batch(12)
    out = np.full((12, *OUT, 3), 7, np.uint8)
    with BatchDecoder(num_threads=2) as decoder:
        errors = decoder.decode_into(records, crops, flips, out)
    assert errors == [None] * 12
    for k in range(12):
        want = decode(records[k], crop=tuple(crops[k]), size=OUT, flip=bool(flips[k]))
        np.testing.assert_array_equal(out[k], want)


def test_one_and_four_threads_are_bitwise_identical():
    records, crops, flips = make_batch(32, seed=1)
    outs = []
    for threads in (1, 4):
        out = np.empty((32, *OUT, 3), np.uint8)
        decoder = BatchDecoder(num_threads=threads)
        assert decoder.decode_into(records, crops, flips, out) == [None] * 32
        decoder.close()
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_resizing_the_pool_between_batches_keeps_every_batch_whole():
    # Autotune resizes the pool between batches: a worker started by a resize must join only
    # batches that start after it, or run() could return while it still writes.
    records, crops, flips = make_batch(8, seed=2)
    reference = np.empty((8, *OUT, 3), np.uint8)
    with BatchDecoder(num_threads=1) as decoder:
        decoder.decode_into(records, crops, flips, reference)
        for round_index in range(60):
            decoder.num_threads = 1 + round_index % 4
            out = np.zeros((8, *OUT, 3), np.uint8)
            assert decoder.decode_into(records, crops, flips, out) == [None] * 8
            np.testing.assert_array_equal(out, reference)


def test_failed_samples_are_zero_filled_with_a_message():
    good = photo_jpeg(60, 80, seed=3)
    records = [good, b"\xff\xd8\xff\xdbbroken", good[: len(good) // 3], b"nothing", good]
    crops = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [50, 70, 20, 20]])
    out = np.full((5, 16, 16, 3), 9, np.uint8)
    errors = BatchDecoder().decode_into(records, crops, np.zeros(5, bool), out)
    assert errors[0] is None
    for k in (1, 2, 3, 4):  # 4: the crop does not fit in the 60x80 image
        assert isinstance(errors[k], str) and errors[k]
        assert not out[k].any()
    assert out[0].any()


def test_zero_box_means_whole_image():
    data = photo_jpeg(30, 50, seed=4)
    out = np.empty((1, 30, 50, 3), np.uint8)
    assert BatchDecoder().decode_into([data], [[0, 0, 0, 0]], [False], out) == [None]
    np.testing.assert_array_equal(out[0], decode(data))


def test_corpus_batch_full_size():
    images = [im for im in corpus(((7, 13),))]
    out = np.empty((len(images), 7, 13, 3), np.uint8)
    errors = BatchDecoder(2).decode_into(
        [im.data for im in images], np.zeros((len(images), 4)), np.zeros(len(images), bool), out
    )
    assert errors == [None] * len(images)
    for k, im in enumerate(images):
        np.testing.assert_array_equal(out[k], decode(im.data))


def test_torch_tensor_out_is_written_in_place():
    records, crops, flips = make_batch(4, seed=2)
    tensor = torch.zeros((4, *OUT, 3), dtype=torch.uint8)
    assert BatchDecoder().decode_into(records, crops, flips, tensor) == [None] * 4
    want = np.empty((4, *OUT, 3), np.uint8)
    assert BatchDecoder().decode_into(records, crops, flips, want) == [None] * 4
    np.testing.assert_array_equal(tensor.numpy(), want)


def test_num_threads_setter_resizes_the_pool():
    # The decoder's threads are OS threads (C++ pool or Python executor): count them.
    process = psutil.Process()
    records, crops, flips = make_batch(12, seed=5)
    out = np.empty((12, *OUT, 3), np.uint8)
    reference = np.empty_like(out)
    decoder = BatchDecoder(num_threads=1)
    assert decoder.decode_into(records, crops, flips, reference) == [None] * 12
    one_thread = process.num_threads()
    decoder.num_threads = 4
    assert decoder.decode_into(records, crops, flips, out) == [None] * 12
    assert process.num_threads() > one_thread  # the pool grew
    np.testing.assert_array_equal(out, reference)
    decoder.close()
    with pytest.raises(FastloaderError):
        decoder.decode_into(records, crops, flips, out)
    for bad in (0, -1):
        with pytest.raises(InvalidArgumentError, match="num_threads"):
            BatchDecoder(num_threads=1).num_threads = bad


def test_pillow_backend_is_forced():
    # Forced onto Pillow, a JPEG crop decodes to exactly the Pillow reference semantics.
    decoder = BatchDecoder(backend="pillow")
    assert decoder.backend == "pillow"
    records, crops, flips = make_batch(5, seed=6)
    out = np.empty((5, *OUT, 3), np.uint8)
    assert decoder.decode_into(records, crops, flips, out) == [None] * 5
    for k in range(5):
        want = pillow_reference(bytes(records[k]), tuple(crops[k]), OUT, bool(flips[k]))
        np.testing.assert_array_equal(out[k], want)


@pytest.mark.parametrize(
    "out",
    [
        np.empty((2, 8, 8, 3), np.float32),
        np.empty((3, 8, 8, 3), np.uint8),
        np.empty((2, 8, 8, 4), np.uint8),
        np.empty((2, 8, 8, 3), np.uint8)[:, :, ::-1],
    ],
)
def test_bad_out_is_rejected(out):
    data = photo_jpeg(20, 20, seed=1)
    with pytest.raises(InvalidArgumentError):
        BatchDecoder().decode_into([data, data], np.zeros((2, 4)), np.zeros(2, bool), out)


def test_bad_arguments_are_rejected():
    data = photo_jpeg(20, 20, seed=1)
    out = np.empty((2, 8, 8, 3), np.uint8)
    with pytest.raises(InvalidArgumentError):
        BatchDecoder().decode_into([data, data], np.zeros((2, 3)), np.zeros(2, bool), out)
    with pytest.raises(InvalidArgumentError):
        BatchDecoder().decode_into([data, data], np.zeros((2, 4)), np.zeros(3, bool), out)
    with pytest.raises(InvalidTypeError):
        BatchDecoder().decode_into(data, np.zeros((2, 4)), np.zeros(2, bool), out)
    with pytest.raises(InvalidArgumentError):
        BatchDecoder(num_threads=0)
    with pytest.raises(InvalidArgumentError):
        BatchDecoder(backend="turbo")
