"""The compiled core specifically: exact Pillow parity, header parity, the import guard."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fastloader.decode import _native
from fastloader.decode.decode import BatchDecoder, decode
from fastloader.decode.pillow import header_pillow
from fastloader.errors import NativeUnavailableError
from helpers import make_batch, pillow_reference
from jpeg_corpus import corpus, photo_jpeg, random_boxes

pytestmark = pytest.mark.wheel


@pytest.fixture
def fresh_loader(monkeypatch):
    """Forget the cached import so a test can change what _native sees."""
    monkeypatch.setattr(_native, "_loaded", False)
    monkeypatch.setattr(_native, "_module", None)
    yield
    _native._loaded = False


@pytest.mark.native
def test_native_is_used():
    # Routed to the core: the batch equals the core's own decode of each sample, bit for bit,
    # and differs from the Pillow backend's (the resize kernels differ by a level in places).
    assert _native.native_available()
    core = _native.require_native()
    records, crops, flips = make_batch(6)
    out = np.empty((6, 40, 48, 3), np.uint8)
    pillow = np.empty_like(out)
    assert BatchDecoder(backend="native").decode_into(records, crops, flips, out) == [None] * 6
    assert BatchDecoder(backend="pillow").decode_into(records, crops, flips, pillow) == [None] * 6
    for k in range(5):  # the JPEGs (record 5 is a PNG: Pillow decodes it on both backends)
        one = np.empty((40, 48, 3), np.uint8)
        assert core.decode_into(records[k], tuple(crops[k]), bool(flips[k]), one) is None
        np.testing.assert_array_equal(out[k], one)
    assert not np.array_equal(out[:5], pillow[:5])


@pytest.mark.native
def test_native_header_equals_pillow_header():
    core = _native.require_native()
    for image in corpus(((7, 13), (37, 53))):
        native, pillow = core.header(image.data), header_pillow(image.data)
        for name, value in pillow.__dict__.items():
            assert getattr(native, name) == value, (image.name, name)


@pytest.mark.native
@pytest.mark.parametrize("subsampling", [0, 1, 2])
@pytest.mark.parametrize("progressive", [False, True])
def test_crop_aware_decode_is_pixel_identical_to_full_decode(subsampling, progressive):
    # The column window (jpeg_crop_scanline) and skipped rows must not change a single pixel.
    core = _native.require_native()
    data = photo_jpeg(150, 200, seed=subsampling, subsampling=subsampling, progressive=progressive)
    full = decode(data)
    for top, left, h, w in random_boxes(np.random.default_rng(subsampling), 150, 200, 12):
        out = np.empty((h, w, 3), np.uint8)
        assert core.decode_into(data, (top, left, h, w), False, out, dct_scaling=False) is None
        np.testing.assert_array_equal(out, full[top : top + h, left : left + w])


@pytest.mark.native
def test_resize_within_one_level_of_pillow_without_dct_scaling():
    # Same taps and fixed point as Pillow; Pillow 13 sometimes runs the vertical pass first,
    # which moves a few pixels by one level, so allow exactly that.
    core = _native.require_native()
    data = photo_jpeg(150, 200, seed=7)
    rng = np.random.default_rng(7)
    for box in random_boxes(rng, 150, 200, 24):
        size = (int(rng.integers(5, 90)), int(rng.integers(5, 90)))
        flip = bool(rng.integers(0, 2))
        out = np.empty((*size, 3), np.uint8)
        assert core.decode_into(data, box, flip, out, dct_scaling=False) is None
        diff = np.abs(out.astype(np.int16) - pillow_reference(data, box, size, flip))
        assert diff.max() <= 1


@pytest.mark.native
def test_cmyk_conversion_is_exactly_pillows():
    for image in corpus(((37, 53),)):
        if image.color_space == "cmyk":
            np.testing.assert_array_equal(decode(image.data), pillow_reference(image.data))


@pytest.mark.native
def test_stale_extension_is_refused(monkeypatch, fresh_loader):
    monkeypatch.setattr(_native, "__version__", "0.0.0-other")
    with pytest.warns(RuntimeWarning, match="stale"):
        assert _native.native_module() is None
    with pytest.raises(NativeUnavailableError, match="stale"):
        BatchDecoder(backend="native")


def test_disabled_by_environment(monkeypatch, fresh_loader):
    monkeypatch.setenv("FASTLOADER_DISABLE_NATIVE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit opt-out is not worth a warning
        assert _native.native_module() is None
        assert not _native.native_available()
    with pytest.raises(NativeUnavailableError, match="FASTLOADER_DISABLE_NATIVE"):
        _native.require_native()
    assert BatchDecoder(backend="auto").backend == "pillow"
