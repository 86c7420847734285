"""JPEGs libjpeg warns about are accepted and refused as Pillow does, with Pillow's pixels, by
decode(), header(), both BatchDecoder backends, pack() and verify (jpeg_edits builds them);
a file whose entropy data is damaged is refused by the native decoder, which can tell."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fastloader import native_available
from fastloader.decode.decode import BatchDecoder, decode, header
from fastloader.decode.pillow import decode_pillow
from fastloader.errors import DecodeError
from jpeg_edits import DAMAGED, REFUSED, WARNINGS, Edit, bases

BASES = bases()
# Every (base, edit) pair whose edit changes the file (a CMYK file has no JFIF to edit).
CASES = [
    pytest.param(BASES[name], edit, id=f"{name}-{edit.name}")
    for name in BASES
    for edit in (*WARNINGS, *DAMAGED, *REFUSED)
    if edit.apply(BASES[name]) != BASES[name]
]
# The cases both backends agree on (a damaged file only the native decoder refuses).
AGREED = [case for case in CASES if not case.values[1].damaged]
# Crops the loader could plan, no resize: pixels must be Pillow's, bit for bit.
CROPS = np.array([[0, 0, 0, 0], [5, 7, 40, 50], [20, 10, 41, 73], [0, 0, 61, 83]], np.int32)


pytestmark = pytest.mark.wheel


def _pillow_decodes(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.convert("RGB")
    except Exception:  # Pillow's refusals come in many types
        return False
    return True


@pytest.mark.parametrize(("base", "edit"), CASES)
def test_pillow_gives_each_edit_its_listed_verdict(base: bytes, edit: Edit) -> None:
    assert _pillow_decodes(base)
    assert _pillow_decodes(edit.apply(base)) == edit.decodes


@pytest.mark.parametrize(("base", "edit"), CASES)
def test_decode_accepts_what_pillow_accepts_with_its_pixels(base: bytes, edit: Edit) -> None:
    data = edit.apply(base)
    if not edit.decodes or (edit.damaged and native_available()):
        with pytest.raises(DecodeError):
            decode(data)
        return
    np.testing.assert_array_equal(decode(data), decode_pillow(data, None, None, False))
    assert (header(data).height, header(data).width) == (61, 83)


@pytest.mark.parametrize(("base", "edit"), CASES)
def test_header_refuses_only_what_pillow_cannot_open(base: bytes, edit: Edit) -> None:
    data = edit.apply(base)
    try:
        Image.open(io.BytesIO(data)).close()
        opens = True
    except Exception:
        opens = False
    if opens:
        assert (header(data).height, header(data).width) == (61, 83)
    else:
        with pytest.raises(DecodeError):
            header(data)


@pytest.mark.native
@pytest.mark.parametrize(("base", "edit"), AGREED)
def test_native_batches_match_the_pillow_backend(base: bytes, edit: Edit) -> None:
    data = edit.apply(base)
    crops = CROPS if edit.decodes else CROPS[[0, 3]]  # a refusal is only sure for whole reads
    results = {}
    for backend in ("native", "pillow"):
        out = np.zeros((len(crops), 24, 30, 3), np.uint8)
        with BatchDecoder(2, backend) as decoder:
            errors = [decoder.decode_into([data], crops[k:k + 1], [k % 2 == 1],
                                          np.zeros((1, int(h or 61), int(w or 83), 3), np.uint8))
                      for k, (_, _, h, w) in enumerate(crops)]
            resized = decoder.decode_into([data] * len(crops), crops, [False] * len(crops), out)
        results[backend] = ([e[0] is None for e in errors], resized, out)
    native, pillow = results["native"], results["pillow"]
    assert native[0] == pillow[0] == [edit.decodes] * len(crops)
    assert [e is None for e in native[1]] == [e is None for e in pillow[1]]
    if edit.decodes:  # the resized crops: within the backends' bound (test_backend_pixels)
        assert np.abs(native[2].astype(np.int16) - pillow[2]).mean() <= 2.0


@pytest.mark.native
@pytest.mark.parametrize(("base", "edit"), [c for c in CASES if c.values[1].damaged])
def test_native_refuses_damaged_data_that_pillow_shows_grey(base: bytes, edit: Edit) -> None:
    data = edit.apply(base)
    whole = np.array([[0, 0, 61, 83]], np.int32)
    for backend, verdict in (("native", False), ("pillow", True)):
        with BatchDecoder(1, backend) as decoder:
            out = np.zeros((1, 61, 83, 3), np.uint8)
            errors = decoder.decode_into([data], whole, [False], out)
        assert (errors[0] is None) == verdict, (backend, errors)


@pytest.mark.native
@pytest.mark.parametrize(("base", "edit"), [c for c in AGREED if c.values[1].decodes])
def test_native_crops_are_pillows_pixels(base: bytes, edit: Edit) -> None:
    data = edit.apply(base)
    with BatchDecoder(1, "native") as native:
        for top, left, height, width in CROPS[1:3]:
            out = np.zeros((1, height, width, 3), np.uint8)
            crop = np.array([[top, left, height, width]], np.int32)
            assert native.decode_into([data], crop, [False], out) == [None]
            want = decode_pillow(data, (top, left, height, width), None, False)
            np.testing.assert_array_equal(out[0], want)


def _edited_tree(root: Path) -> dict[str, bool]:
    """A class folder per base, a file per edit; relative path -> whether the loader's decoder
    (native where built, else Pillow) decodes it."""
    verdicts = {}
    for name, base in BASES.items():
        (root / name).mkdir(parents=True)
        for edit in (*WARNINGS, *DAMAGED, *REFUSED):
            data = edit.apply(base)
            if data != base:
                (root / name / f"{edit.name}.jpg").write_bytes(data)
                verdicts[f"{name}/{edit.name}.jpg"] = (
                    edit.native_decodes() if native_available() else edit.decodes)
    return verdicts


def test_pack_and_verify_keep_what_pillow_decodes(tmp_path: Path) -> None:
    from fastloader import open_dataset, pack

    verdicts = _edited_tree(tmp_path / "src")
    pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1, quiet=True, skip_bad=True)
    skipped = json.loads((tmp_path / "out.lmdb" / "skipped.json").read_text())
    assert sorted(s["path"] for s in skipped) == sorted(p for p, ok in verdicts.items() if not ok)
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert sorted(ds.paths) == sorted(p for p, ok in verdicts.items() if ok)
        for i in range(len(ds)):  # the loader's decoder reads every packed record
            data = bytes(ds.record(i))
            np.testing.assert_array_equal(decode(data), decode_pillow(data, None, None, False))
    packdata = Path(sys.executable).with_name("packdata")
    run = subprocess.run([str(packdata), "verify", str(tmp_path / "out.lmdb"), "--decode"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.native
def test_tiled_pack_keeps_what_pillow_decodes_with_its_pixels(tmp_path: Path) -> None:
    from fastloader import open_dataset, pack

    verdicts = _edited_tree(tmp_path / "src")
    pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1, quiet=True, tiles=True,
         skip_bad=True)
    with open_dataset(tmp_path / "out.lmdb") as ds, BatchDecoder(1, "native") as native:
        assert sorted(ds.paths) == sorted(p for p, ok in verdicts.items() if ok)
        tiled = 0
        for i in range(len(ds)):
            source = (tmp_path / "src" / ds.paths[i]).read_bytes()
            crop = np.array([[5, 7, 40, 50]], np.int32)
            out = np.zeros((1, 40, 50, 3), np.uint8)
            tiled += ds.tile_table(i) is not None
            tiles = ds.tile_batch([i])
            assert native.decode_into([ds.record(i)], crop, [False], out, tiles) == [None]
            np.testing.assert_array_equal(out[0], decode_pillow(source, (5, 7, 40, 50), None,
                                                                False))
        assert tiled > 0  # the warning-free edits were repacked: the splice path ran
