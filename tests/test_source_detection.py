"""Which kind of source a folder is: class folders of images are an ImageFolder tree whatever
their file names; file groups are known by their sidecars; a folder both readings fit is
refused, naming both and the flag in the words of the interface used."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

import fastloader
from fastloader import open_dataset
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from fastloader.pack.sources.importers import detect


def image(path: Path, fmt: str = "JPEG", seed: int = 0) -> bytes:
    """A small Pillow image written at path (its folders made); its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = Image.new("RGB", (12 + seed, 10), (40 * seed % 256, 90, 200))
    buffer = io.BytesIO()
    pixels.save(buffer, format=fmt)
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def test_class_folders_of_dotted_names_are_an_imagefolder_tree(tmp_path: Path) -> None:
    src = tmp_path / "src"
    written = [image(src / "cats" / "frame.000.jpg", seed=0),
               image(src / "cats" / "frame.001.jpg", seed=1),
               image(src / "dogs" / "frame.000.jpg", seed=2)]
    assert detect(src, None) == "imagefolder"
    assert main([str(src), str(tmp_path / "o.lmdb"), "--quiet", "--workers", "1"]) == 0
    with open_dataset(tmp_path / "o.lmdb") as ds:
        assert ds.manifest.version == 2 and ds.classes == ["cats", "dogs"]
        assert [f["name"] for f in ds.manifest.sample_fields] == ["image", "label"]
        assert ds.labels.tolist() == [0, 0, 1]
        assert [bytes(ds.record(k)) for k in range(3)] == written


def test_a_gif_beside_a_tif_is_two_images(tmp_path: Path) -> None:
    src = tmp_path / "src"
    gif, tif = image(src / "a" / "x.gif", "GIF"), image(src / "a" / "x.tif", "TIFF", 1)
    png = image(src / "b" / "y.png", "PNG", 2)
    assert detect(src, None) == "imagefolder"
    manifest = fastloader.pack(src, tmp_path / "o.lmdb", workers=1)
    assert manifest.num_samples == 3
    with open_dataset(tmp_path / "o.lmdb") as ds:
        assert sorted(bytes(ds.record(k)) for k in range(3)) == sorted([gif, tif, png])


def test_file_groups_are_known_by_their_sidecars(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    for k in range(3):
        image(flat / f"s{k}.jpg", seed=k)
        (flat / f"s{k}.cls").write_text(str(k % 2))
    assert detect(flat, None) == "files"
    manifest = fastloader.pack(flat, tmp_path / "o.lmdb", workers=1)
    assert manifest.version == 2 and manifest.num_samples == 3
    pairs = tmp_path / "pairs"  # an image and its mask, no class folders: groups only
    for k in range(2):
        image(pairs / f"s{k}.jpg", seed=k)
        image(pairs / f"s{k}.mask.png", "PNG", seed=k)
    assert detect(pairs, None) == "files"
    shards = tmp_path / "shards"  # a folder of tar shards
    shards.mkdir()
    (shards / "a.tar").write_bytes(b"")
    (shards / "b.tgz").write_bytes(b"")
    assert detect(shards, None) == "tar"


def test_a_folder_read_two_ways_is_refused_in_the_words_of_each_interface(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    for k, name in enumerate(["cats", "cats", "dogs"]):
        image(src / name / f"s{k}.jpg", seed=k)
        (src / name / f"s{k}.txt").write_text(f"caption {k}")
    with pytest.raises(PackError, match="read two ways") as caught:
        fastloader.pack(src, tmp_path / "o.lmdb", workers=1)
    said = str(caught.value)
    assert "ImageFolder tree (2 class folders such as 'cats'" in said
    assert "file groups" in said and "cats/s0 with fields jpg, txt" in said
    assert 'source_format="imagefolder"' in said and 'source_format="files"' in said
    assert "--source-format" not in said
    assert main([str(src), str(tmp_path / "o.lmdb"), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "read two ways" in err and "source_format" not in err
    assert "--source-format imagefolder" in err and "--source-format files" in err
    assert not (tmp_path / "o.lmdb").exists()
    tree = ["image", "label"]  # the tree's fields (both readings write format v2: issue 36)
    for kind, is_tree in (("imagefolder", True), ("files", False)):
        dst = tmp_path / f"{kind}.lmdb"
        assert main([str(src), str(dst), "--quiet", "--workers", "1",
                     "--source-format", kind]) == 0
        with open_dataset(dst) as ds:
            names = [f["name"] for f in ds.manifest.sample_fields]
            assert ds.manifest.version == 2 and (names == tree) == is_tree and len(ds) == 3
