"""pack(tiles=True) end to end: lossless records, tile index, crops through BatchDecoder, verify."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fastloader.decode import tiles
from fastloader.decode.decode import BatchDecoder
from fastloader.format.manifest import read_manifest
from fastloader.format.open import open_dataset
from fastloader.pack.cli.main import main
from fastloader.pack.pipeline.tree import pack
from fastloader.pack.staging.journal import staging_path
from helpers import pillow_pixels
from imagegen import encode, photo_like
from treegen import make_flat_tree

TILE_FIELDS = ("tiles_header", "tiles_offsets", "tiles_start", "source_crc32")


def _add_photos(root: Path) -> None:
    """Larger JPEGs over every subsampling, so crops span many restart segments."""
    specs = {"420": {}, "422": {"subsampling": "4:2:2"}, "444": {"subsampling": 0}}
    for k, (name, options) in enumerate(specs.items()):
        data = encode(photo_like(150 + 7 * k, 221 + 5 * k, 40 + k), quality=90, **options)
        (root / "eel" / f"photo_{name}.jpg").write_bytes(data)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory,
           mixed_tree: tuple[Path, dict[str, bytes]]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiles_pack")
    shutil.copytree(mixed_tree[0], root / "src")  # the shared tree stays as it is
    _add_photos(root / "src")
    pack(root / "src", root / "tiled.lmdb", tiles=True, workers=1)
    pack(root / "src", root / "plain.lmdb", workers=1)
    return {"src": root / "src", "tiled": root / "tiled.lmdb", "plain": root / "plain.lmdb"}


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
@pytest.mark.native
def test_tiled_records_decode_to_exactly_the_source_pixels(
    tmp_path: Path, suffix: str, mixed_tree: tuple[Path, dict[str, bytes]]
) -> None:
    src, written = mixed_tree
    manifest = pack(src, tmp_path / f"t{suffix}", tiles=True, workers=1)
    assert manifest.options["tiles"] == {"version": 1, "restart_mcus": 2}
    with open_dataset(tmp_path / f"t{suffix}") as ds:
        tiled = [i for i in range(len(ds)) if ds.tile_table(i) is not None]
        # Every JPEG of the mixed tree is tileable (progressive, gray, CMYK, 1x1 included).
        jpegs = [i for i in range(len(ds)) if written[ds.path(i)][:2] == b"\xff\xd8"]
        assert tiled == jpegs and manifest.stats["tiled"] == len(jpegs)
        assert manifest.stats["untiled"] == len(ds) - len(jpegs)
        for i in range(len(ds)):
            source, record = written[ds.path(i)], bytes(ds.record(i, verify=True))
            if i in tiled:
                assert np.array_equal(pillow_pixels(record), pillow_pixels(source)), ds.path(i)
                assert tiles.scan(record).offsets.tolist() == ds.tile_table(i).offsets.tolist()
            else:  # PNG, GIF, BMP, WebP keep their bytes
                assert record == source


def _batch(ds, size: tuple[int, int] | None, seed: int, threads: int = 2, tiled: bool = True):
    rng = np.random.default_rng(seed)
    idx = np.arange(len(ds))
    shapes = ds.shapes[idx]
    h = rng.integers(1, shapes[:, 0] + 1)
    w = rng.integers(1, shapes[:, 1] + 1)
    crops = np.stack(
        [rng.integers(0, shapes[:, 0] - h + 1), rng.integers(0, shapes[:, 1] - w + 1), h, w], 1
    )
    if size is None:  # one box for all, so the output size equals the crop size
        crops[:] = [3, 5, 7, 9]
        crops[(shapes[:, 0] < 10) | (shapes[:, 1] < 14)] = [0, 0, 1, 1]
    flips = rng.random(len(idx)) < 0.5
    out = np.zeros((len(idx), *(size or (7, 9)), 3), np.uint8)
    records = [ds.record(i) for i in idx]
    with BatchDecoder(threads) as decoder:
        errors = decoder.decode_into(
            records, crops, flips, out, tiles=ds.tile_batch(idx) if tiled else None
        )
    assert errors == [None] * len(idx)
    return out


@pytest.mark.native
def test_tiled_crops_equal_the_untiled_datasets_crops(packed: dict[str, Path]) -> None:
    with open_dataset(packed["tiled"]) as ds, open_dataset(packed["plain"]) as plain:
        assert ds.tiled and not plain.tiled and plain.tile_batch([0]) is None
        assert ds.paths == plain.paths
        # Crop only (output size == crop size): pixel-exact.
        assert np.array_equal(_batch(ds, None, 0), _batch(plain, None, 0))
        for seed, size in enumerate([(24, 24), (5, 31), (64, 48)], 1):  # crop + resize + flip
            got = _batch(ds, size, seed)
            assert np.array_equal(got, _batch(plain, size, seed))
            assert np.array_equal(got, _batch(ds, size, seed, threads=1))
            assert np.array_equal(got, _batch(ds, size, seed, threads=3))
            assert np.array_equal(got, _batch(ds, size, seed, tiled=False))


@pytest.mark.native
def test_pillow_path_ignores_tables_and_gives_the_same_pixels(packed: dict[str, Path]) -> None:
    with open_dataset(packed["tiled"]) as ds, open_dataset(packed["plain"]) as plain:
        idx = np.arange(len(ds))
        rng = np.random.default_rng(5)
        h = rng.integers(1, ds.shapes[:, 0] + 1)
        w = rng.integers(1, ds.shapes[:, 1] + 1)
        crops = np.stack([np.zeros_like(h), np.zeros_like(w), h, w], 1)
        flips = rng.random(len(idx)) < 0.5
        results = []
        for dataset in (ds, plain):
            out = np.zeros((len(idx), 16, 16, 3), np.uint8)
            with BatchDecoder(2, backend="pillow") as decoder:
                records = [dataset.record(i) for i in idx]
                errors = decoder.decode_into(records, crops, flips, out, dataset.tile_batch(idx))
            assert errors == [None] * len(idx)
            results.append(out)
        assert np.array_equal(results[0], results[1])


@pytest.mark.native
def test_untiled_dataset_manifest_and_index_are_unchanged(packed: dict[str, Path]) -> None:
    manifest = read_manifest(packed["plain"])
    assert "tiles" not in manifest.options and "tiled" not in manifest.stats
    assert not set(TILE_FIELDS) & set(manifest.fields)
    tiled = read_manifest(packed["tiled"])
    assert set(TILE_FIELDS) <= set(tiled.fields)
    with open_dataset(packed["tiled"]) as ds:
        start = ds.field("tiles_start")
        assert start.dtype == np.uint64 and start[-1] == ds.field("tiles_offsets").size
        assert ds.field("tiles_header").shape == (len(ds), 9)


@pytest.mark.native
def test_corrupt_tile_index_gives_errors_naming_the_record(tmp_path: Path) -> None:
    make_flat_tree(tmp_path / "src", classes=1, per_class=3, size=40)
    dst = tmp_path / "t.lmdb"
    pack(tmp_path / "src", dst, tiles=True, workers=1)
    offsets_path = dst / "index" / "tiles_offsets.npy"
    offsets = np.load(offsets_path)
    start = np.load(dst / "index" / "tiles_start.npy")
    offsets[int(start[1]) + 1] += 3  # record 1: a segment boundary off by 3 bytes
    np.save(offsets_path, offsets)
    header_path = dst / "index" / "tiles_header.npy"
    headers = np.load(header_path)
    headers[2, 6] += 1  # record 2: mcus_per_row no longer matches the width
    np.save(header_path, headers)
    # The sha256 of each index file is checked at open; re-sign the edits in manifest.json so
    # this reaches the checks behind it (tile tables checked per record, in C++ too).
    manifest = json.loads((dst / "manifest.json").read_text())
    for name in ("tiles_offsets", "tiles_header"):
        data = (dst / "index" / f"{name}.npy").read_bytes()
        manifest["fields"][name]["sha256"] = hashlib.sha256(data).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(manifest))
    with open_dataset(dst) as ds:
        with pytest.raises(tiles.CorruptRecordError, match=r"record 2 \(shard .*img_0002"):
            ds.tile_table(2)
        out = np.zeros((3, 8, 8, 3), np.uint8)
        crops = np.array([[1, 1, 30, 30]] * 3, np.int32)
        with BatchDecoder(2) as decoder:
            errors = decoder.decode_into(
                [ds.record(i) for i in range(3)],
                crops,
                np.zeros(3, bool),
                out,
                ds.tile_batch([0, 1, 2]),
            )
        assert errors[0] is None and "tile table" in errors[1] and "tile table" in errors[2]
        assert not out[1].any() and not out[2].any()  # failed slots are zero-filled
    assert main(["verify", str(dst), "--quiet"]) == 1


@pytest.mark.native
def test_verify_decode_on_a_tiled_dataset(
    packed: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(packed["tiled"]), "--decode", "--source", str(packed["src"])]) == 0
    out = capsys.readouterr().out
    assert "tiles: 11 tile tables match their records; 11 records equal their source pixels" in out


@pytest.mark.native
def test_verify_reports_a_record_whose_table_disagrees(tmp_path: Path) -> None:
    from fastloader.pack.maintain.verify import verify

    make_flat_tree(tmp_path / "src", classes=1, per_class=2, size=40)
    dst = tmp_path / "t.h5"
    pack(tmp_path / "src", dst, tiles=True, workers=1)
    path = dst / "index" / "tiles_offsets.npy"
    offsets = np.load(path)
    offsets[1] += 1
    np.save(path, offsets)
    report = verify(dst, decode=True)
    assert 0 in report.bad_records
    assert any("record 0" in p and "tile" in p for p in report.problems)


@pytest.mark.native
def test_resume_with_tiles_matches_a_fresh_pack(tmp_path: Path) -> None:
    make_flat_tree(tmp_path / "src", classes=2, per_class=15, size=40)
    dst, options = tmp_path / "t.lmdb", {"shard_size": 8 << 10, "workers": 1, "tiles": True}

    def stop(done: int, total: int, nbytes: int) -> None:
        if done >= 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack(tmp_path / "src", dst, progress=stop, **options)
    journal = staging_path(dst) / "journal"
    assert len(list(journal.glob("*.tiles.npz"))) == len(list(journal.glob("*.json"))) >= 2
    pack(tmp_path / "src", dst, resume=True, **options)
    pack(tmp_path / "src", tmp_path / "fresh.lmdb", **options)
    got, fresh = read_manifest(dst), read_manifest(tmp_path / "fresh.lmdb")
    assert {n: f.sha256 for n, f in got.fields.items()} == {
        n: f.sha256 for n, f in fresh.fields.items()
    }
    assert [s.sha256 for s in got.shards] == [s.sha256 for s in fresh.shards]


@pytest.mark.native
def test_a_resume_without_tiles_starts_over_instead_of_mixing_formats(tmp_path: Path) -> None:
    make_flat_tree(tmp_path / "src", classes=1, per_class=12, size=40)
    dst = tmp_path / "t.lmdb"

    def stop(done: int, total: int, nbytes: int) -> None:
        if done >= 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack(tmp_path / "src", dst, shard_size=4 << 10, workers=1, tiles=True, progress=stop)
    plan = json.loads((staging_path(dst) / "plan.json").read_text())
    assert plan["tiles"] == {"version": 1, "restart_mcus": 2}
    pack(tmp_path / "src", dst, shard_size=4 << 10, workers=1, resume=True)
    with open_dataset(dst) as ds:
        assert not ds.tiled
        assert all(
            bytes(ds.record(i)) == (tmp_path / "src" / ds.path(i)).read_bytes()
            for i in range(len(ds))
        )


def test_without_the_extension_tiles_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastloader.errors import PackError

    make_flat_tree(tmp_path / "src", classes=1, per_class=2)
    monkeypatch.setenv("FASTLOADER_DISABLE_NATIVE", "1")
    with pytest.raises(PackError, match=r"native extension.*make install"):
        pack(tmp_path / "src", tmp_path / "x.lmdb", tiles=True)
    assert main([str(tmp_path / "src"), str(tmp_path / "y.lmdb"), "--tiles", "--quiet"]) == 2
    assert not (tmp_path / "x.lmdb").exists() and not (tmp_path / "y.lmdb").exists()


@pytest.mark.native
def test_tiled_data_reads_with_pillow_alone(
    packed: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTLOADER_DISABLE_NATIVE", "1")
    with open_dataset(packed["tiled"]) as ds, open_dataset(packed["plain"]) as plain:
        assert ds.tiled
        for i in range(len(ds)):  # Pillow decodes tiled records fully: same pixels
            assert np.array_equal(pillow_pixels(ds.record(i)), pillow_pixels(plain.record(i)))


def test_bad_tiles_arguments_raise_typed_errors() -> None:
    from fastloader.errors import InvalidArgumentError, InvalidTypeError

    record = encode(photo_like(20, 20, 1))
    out = np.zeros((1, 4, 4, 3), np.uint8)
    args = ([record], np.zeros((1, 4), np.int32), np.zeros(1, bool), out)
    with BatchDecoder(1) as decoder:
        with pytest.raises(InvalidTypeError, match="tiles"):
            decoder.decode_into(*args, tiles=[1, 2])
        bad = tiles.TileBatch(np.zeros((2, 9), np.int64), np.zeros(0, np.uint32), np.zeros((1, 2)))
        with pytest.raises(InvalidArgumentError, match=r"headers must be \(1, 9\)"):
            decoder.decode_into(*args, tiles=bad)
        untiled = tiles.TileBatch.from_tables([None])  # all-zero header: decoded as usual
        assert decoder.decode_into(*args, tiles=untiled) == [None] and out.any()


@pytest.mark.native
def test_a_span_outside_the_offsets_is_a_per_sample_error() -> None:
    record = tiles.repack(encode(photo_like(40, 70, 2)))
    assert record is not None
    batch = tiles.TileBatch.from_tables([record.table, record.table])
    batch.spans[1] = (0, batch.offsets.size + 5)
    out = np.zeros((2, 8, 8, 3), np.uint8)
    crops = np.array([[2, 3, 20, 30]] * 2, np.int32)
    with BatchDecoder(2) as decoder:
        errors = decoder.decode_into([record.data] * 2, crops, np.zeros(2, bool), out, batch)
    assert errors[0] is None and errors[1] is not None and "tile table" in errors[1]
