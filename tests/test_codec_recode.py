"""`packdata recode --codec coeffs`, info, verify --decode, and the loaders over coeffs datasets."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fastloader import FastLoader
from fastloader.decode import coeffs
from fastloader.decode.augment import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize
from fastloader.decode.detect import ResizeFit
from fastloader.errors import InvalidArgumentError, PackError
from fastloader.format.dataset import PackedDataset
from fastloader.format.manifest import Codec
from fastloader.pack.cli.main import main
from fastloader.pack.pipeline.recode import recode
from fastloader.pack.pipeline.tree import pack
from helpers import MEAN, STD, collect
from imagegen import encode, photo_like
from jpeg_writer import first_scans, write_jpeg
from treegen import MIXED_SPECS

pytestmark = pytest.mark.native


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, mixed_tree) -> Path:
    """The mixed tree (every mode and format) plus a 4:1:1 JPEG and a progressive one cut after
    its first scans (libjpeg smooths it: a kind records do not hold)."""
    root = tmp_path_factory.mktemp("recode-tree") / "src"
    shutil.copytree(mixed_tree[0], root)
    (root / "eel" / "k411.jpg").write_bytes(write_jpeg(photo_like(16, 40, 3),
                                                       ((4, 1), (1, 1), (1, 1))))
    cut = first_scans(encode(photo_like(32, 40, 4), "JPEG", "RGB", progressive=True), 3)
    (root / "eel" / "unfinished.jpg").write_bytes(cut)
    return root


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory, tree: Path) -> tuple[Path, Path]:
    """(JPEG dataset, its coeffs recode) of the tree."""
    folder = tmp_path_factory.mktemp("recode")
    src = folder / "jpeg.lmdb"
    pack(tree, src, workers=1, quiet=True)
    assert main(["recode", str(src), str(folder / "coeffs.lmdb"), "--codec", "coeffs",
                 "--quiet"]) == 0
    return src, folder / "coeffs.lmdb"


def test_recode_converts_jpegs_and_keeps_everything_else(mixed: tuple[Path, Path]) -> None:
    src, dst = mixed
    with PackedDataset(src) as a, PackedDataset(dst) as b:
        assert len(a) == len(b) and list(a.classes) == list(b.classes)
        assert np.array_equal(a.labels, b.labels) and np.array_equal(a.shapes, b.shapes)
        assert list(a.paths) == list(b.paths)
        assert b.manifest.options["codec"] == "coeffs"
        kinds = {}
        for i in range(len(a)):
            old, new = bytes(a.record(i)), bytes(b.record(i))
            name = Path(a.paths[i]).name
            kinds[name] = Codec(int(b.codecs[i])).name
            if int(b.codecs[i]) == Codec.COEFFS:
                assert int(a.codecs[i]) == Codec.JPEG and coeffs.is_coeffs(new)
                from fastloader import decode

                assert np.array_equal(decode(new), decode(old)), name
            else:
                assert new == old, name  # PNG, GIF, ... and the cut JPEG: the same bytes
    assert kinds["unfinished.jpg"] == "JPEG"  # a kind coeffs records do not hold stays JPEG
    assert kinds["k411.jpg"] == "COEFFS"
    assert kinds["plain.png"] == "PNG"
    assert kinds["progressive.jpg"] == kinds["gray.JPG"] == kinds["cmyk.jpeg"] == "COEFFS"
    with PackedDataset(dst) as b:
        stats = b.manifest.stats
        jpegs = sum(1 for _, _, fmt, _, _ in MIXED_SPECS.values() if fmt == "JPEG")
        assert stats["recoded"] == jpegs + 1 and stats["kept_jpeg"] == 1


def test_info_shows_each_codecs_size(mixed: tuple[Path, Path], capsys) -> None:
    _src, dst = mixed
    assert main(["info", str(dst)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("codecs"))
    assert "COEFFS" in line and "JPEG 1 (" in line and "PNG" in line and "KiB" in line
    from fastloader.pack.maintain.info import dataset_info

    info = dataset_info(dst)
    with PackedDataset(dst) as b:
        coeff, total = int(b.lengths[b.codecs == Codec.COEFFS].sum()), int(b.lengths.sum())
    assert info["codec_bytes"]["COEFFS"] == coeff > 0
    assert sum(info["codec_bytes"].values()) == total
    assert "options   codec=coeffs" in text


def test_verify_decodes_coeffs_records_and_finds_a_damaged_one(mixed, tmp_path, capsys) -> None:
    _, dst = mixed
    assert main(["verify", str(dst), "--decode"]) == 0
    assert "records checked and decoded, all intact" in capsys.readouterr().out
    copy = tmp_path / "copy.lmdb"
    shutil.copytree(dst, copy)
    with PackedDataset(copy) as ds:
        i = int(np.flatnonzero(ds.codecs == Codec.COEFFS)[0])
        record = bytes(ds.record(i))
    shard = next(copy.glob("shard-*.mdb"))
    raw = shard.read_bytes()
    at = raw.index(record) + len(record) // 2
    shard.write_bytes(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1:])
    assert main(["verify", str(copy)]) == 1  # its crc32 now fails
    assert "DAMAGED" in capsys.readouterr().err


def test_recode_refuses_what_it_cannot_convert(mixed, tmp_path) -> None:
    src, dst = mixed
    with pytest.raises(PackError, match="already exists"):
        recode(src, dst)
    with pytest.raises(PackError, match="not supported"):
        recode(src, tmp_path / "x.lmdb", codec="tiles")
    with pytest.raises(PackError, match="not a packed dataset"):
        recode(tmp_path, tmp_path / "y.lmdb")
    assert main(["recode", str(src), str(tmp_path / "z.lmdb")]) == 2  # --codec is required
    manifest = recode(src, dst, overwrite=True)
    assert manifest.options["codec"] == "coeffs"


TRANSFORMS = {
    "train": [RandomResizedCrop(64), RandomHorizontalFlip()],
    "eval": [Resize(40), CenterCrop(32)],
    "letterbox": [ResizeFit(48, fill=114), RandomHorizontalFlip()],
}


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("normalize", [None, (MEAN, STD)], ids=["uint8", "float"])
def test_the_loader_gives_the_jpeg_datasets_batches(mixed, name: str, normalize) -> None:
    """Output sizes at which the JPEG path never takes a DCT-scaled decode: the same bits."""
    src, dst = mixed
    options = {"batch_size": 4, "shuffle": True, "seed": 5, "transforms": TRANSFORMS[name],
               "normalize": normalize, "num_threads": 2}
    with FastLoader(src, **options) as a, FastLoader(dst, **options) as b:
        first, second = collect(a), collect(b)
    assert len(first) == len(second) > 0
    for (x, y), (u, v) in zip(first, second, strict=True):
        assert torch.equal(y, v) and torch.equal(x, u)


def test_dali_refuses_a_coeffs_dataset_naming_codec_jpeg(mixed) -> None:
    from fastloader.loader.dali.pipeline import dali_available

    if not dali_available():
        pytest.skip('NVIDIA DALI is not importable here: pip install "fastloader[dali]"')
    _, dst = mixed
    with pytest.raises(InvalidArgumentError, match="--codec jpeg"):
        FastLoader(dst, batch_size=2, backend="dali", device="cpu")


CHILD = """
import sys
from fastloader import FastLoader
from fastloader.decode.augment import RandomResizedCrop
from fastloader.errors import DecodeError
try:
    for _ in FastLoader(sys.argv[1], batch_size=4, transforms=[RandomResizedCrop(16)]):
        pass
except DecodeError as exc:
    print("DecodeError:", exc)
"""


@pytest.mark.heavy
def test_without_the_extension_a_coeffs_dataset_fails_clearly(mixed) -> None:
    """The env switch is read at import, so the check runs in a child with it set."""
    _, dst = mixed
    env = {**__import__("os").environ, "FASTLOADER_DISABLE_NATIVE": "1"}
    result = subprocess.run([sys.executable, "-c", CHILD, str(dst)], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "coeffs records need the native extension" in result.stdout
    assert "FASTLOADER_DISABLE_NATIVE" in result.stdout and "--codec jpeg" in result.stdout


def test_pack_with_codec_coeffs_equals_pack_then_recode(mixed, tree, tmp_path) -> None:
    import fastloader

    _, recoded = mixed
    dst = tmp_path / "direct.lmdb"
    assert main([str(tree), str(dst), "--codec", "coeffs", "--workers", "1",
                 "--quiet"]) == 0
    assert not list(tmp_path.glob(".*"))  # the JPEG pack it recoded from is gone
    with PackedDataset(dst) as a, PackedDataset(recoded) as b:
        assert a.manifest.options["codec"] == "coeffs"
        assert [bytes(a.record(i)) for i in range(len(a))] == \
            [bytes(b.record(i)) for i in range(len(b))]
    manifest = fastloader.pack(tree, dst, codec="coeffs", overwrite=True, quiet=True, workers=1)
    assert manifest.stats["recoded"] > 0
    with pytest.raises(PackError, match="already exists"):
        fastloader.pack(tree, dst, codec="coeffs", quiet=True)


def test_pack_codec_tiles_is_tiles_and_others_are_refused(mixed_tree, tmp_path) -> None:
    import fastloader

    manifest = fastloader.pack(mixed_tree[0], tmp_path / "t.lmdb", codec="tiles", quiet=True,
                               workers=1)
    assert "tiles" in manifest.options and "codec" not in manifest.options
    with pytest.raises(PackError, match="not one of"):
        fastloader.pack(mixed_tree[0], tmp_path / "x.lmdb", codec="webp")


def test_recode_an_hdf5_dataset(mixed_tree, tmp_path) -> None:
    import fastloader

    src = tmp_path / "data.h5"
    fastloader.pack(mixed_tree[0], src, workers=1, quiet=True)
    manifest = recode(src, tmp_path / "coeffs.h5")
    assert manifest.backend == "hdf5" and manifest.stats["recoded"] > 0
    assert main(["verify", str(tmp_path / "coeffs.h5"), "--decode", "--quiet"]) == 0
    options = {"batch_size": 4, "transforms": TRANSFORMS["eval"], "num_threads": 1}
    with FastLoader(src, **options) as a, FastLoader(tmp_path / "coeffs.h5", **options) as b:
        assert all(torch.equal(x[0], y[0]) for x, y in zip(collect(a), collect(b), strict=True))


def test_recode_back_to_jpeg_keeps_the_pixels(mixed, tmp_path) -> None:
    src, recoded = mixed
    back = tmp_path / "back.lmdb"
    assert main(["recode", str(recoded), str(back), "--codec", "jpeg", "--quiet"]) == 0
    with PackedDataset(src) as a, PackedDataset(back) as b:
        assert b.manifest.options["codec"] == "jpeg"
        assert not (np.asarray(b.codecs) == Codec.COEFFS).any()
        assert np.array_equal(a.codecs, b.codecs)
        assert b.manifest.stats["recoded"] == int((np.asarray(a.codecs) == Codec.JPEG).sum()) - 1
        kept = [i for i in range(len(a)) if a.paths[i].endswith("unfinished.jpg")]
        assert [bytes(a.record(i)) for i in kept] == [bytes(b.record(i)) for i in kept]
    options = {"batch_size": 4, "transforms": TRANSFORMS["train"], "seed": 2, "num_threads": 1}
    with FastLoader(src, **options) as x, FastLoader(back, **options) as y:
        assert all(torch.equal(p[0], q[0]) for p, q in zip(collect(x), collect(y), strict=True))
    from fastloader.loader.dali.pipeline import dali_available

    if dali_available():  # DALI takes the converted dataset
        FastLoader(back, batch_size=2, backend="dali", device="cpu",
                   transforms=TRANSFORMS["train"]).close()


def _mark(copy: Path, i: int, codec: int) -> None:
    """Rewrite record i's codec mark in copy's index, its manifest hash updated with it (as a
    pack that marked it wrongly would have written it)."""
    import hashlib
    import json

    column = np.load(copy / "index" / "codec.npy")
    column[i] = codec
    np.save(copy / "index" / "codec.npy", column)
    manifest = json.loads((copy / "manifest.json").read_text())
    data = (copy / "index" / "codec.npy").read_bytes()
    manifest["fields"]["codec"]["sha256"] = hashlib.sha256(data).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))


def test_verify_reports_a_record_whose_codec_mark_is_wrong(mixed, tmp_path, capsys) -> None:
    from fastloader.pack.maintain.verify import verify

    src, dst = mixed
    for name, path, want, wrong in (("coeffs", dst, Codec.COEFFS, Codec.JPEG),
                                    ("jpeg", src, Codec.JPEG, Codec.COEFFS),
                                    ("png", src, Codec.PNG, Codec.JPEG)):
        copy = tmp_path / f"{name}.lmdb"
        shutil.copytree(path, copy)
        with PackedDataset(copy) as ds:
            i = int(np.flatnonzero(ds.codecs == want)[0])
        assert verify(copy).ok
        _mark(copy, i, int(wrong))
        report = verify(copy)
        assert not report.ok and report.bad_records == [i], name
        assert f"marks it {wrong.name}" in report.problems[0], report.problems
