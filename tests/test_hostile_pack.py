"""packdata against hostile source trees and races: symlink loops, FIFOs, devices, huge and
deep files, a lying JPEG header, two packs of one DST, --overwrite under a running reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fastloader.errors import PackError
from fastloader.format.open import open_dataset
from fastloader.pack.cli.main import main
from fastloader.pack.maintain.verify import verify
from fastloader.pack.pipeline.tree import pack
from fastloader.pack.sources.scan import PATH_MAX, scan
from faults import packdata_command
from imagegen import encode, photo_like

pytestmark = pytest.mark.timeout(120)  # a FIFO or a loop must fail a test, never hang it


def _images(folder: Path, count: int, seed: int, size: int = 24) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for k in range(count):
        (folder / f"img{k}.jpg").write_bytes(encode(photo_like(size, size + k, seed + k)))
        names.append(f"img{k}.jpg")
    return names


def _deep_folder(top: Path) -> str:
    """Make folders below top until the path passes PATH_MAX (via folder fds: a path that long
    cannot be named whole); put an image at the bottom; return the first too-long folder's
    path relative to top's parent."""
    name = "d" * 200
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    length = len(os.fsencode(str(top)))
    relative = [top.name]
    first_too_long = None
    for _ in range(PATH_MAX // 201 + 2):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
        length += 1 + len(name)
        relative.append(name)
        if first_too_long is None and length >= PATH_MAX:
            first_too_long = "/".join(relative)
    image = os.open("deep.jpg", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(image, encode(photo_like(16, 16, 1)))
    os.close(image)
    os.close(fd)
    assert first_too_long is not None
    return first_too_long


@pytest.fixture
def hostile_tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A tree with 4 good images per class plus every trap; returns (src, expected refusals:
    relpath -> a word of the reason)."""
    src = tmp_path / "src"
    _images(src / "a", 4, 0)
    _images(src / "b", 4, 10)
    outside = tmp_path / "outside"
    _images(outside, 2, 20)
    (outside / "again").symlink_to(outside)  # a loop outside SRC
    (src / "a" / "ext").symlink_to(outside)  # followed once: it lies outside SRC
    (src / "b" / "loop").symlink_to("..")  # 18 files became 738 records
    (src / "a" / "self").symlink_to(".")  # two self-links hung the scan
    (src / "a" / "self2").symlink_to(".")
    (src / "b" / "to_a").symlink_to(src / "a")  # class a's files again, under label b
    os.mkfifo(src / "a" / "x.jpg")  # hung forever
    (src / "a" / "zero.jpg").symlink_to("/dev/zero")  # read whole into memory
    _sparse(src / "b" / "sparse.jpg", 3 << 30)
    (src / "b" / "dangling.jpg").symlink_to(tmp_path / "nothing")
    deep = _deep_folder(src / "a")
    refused = {
        "b/loop/": "inside SRC", "a/self/": "inside SRC", "a/self2/": "inside SRC",
        "b/to_a/": "inside SRC", "a/ext/again/": "already visited",
        "a/x.jpg": "not a regular file", "a/zero.jpg": "not a regular file",
        "b/sparse.jpg": "max-file-size", "b/dangling.jpg": "dangling", deep + "/": "PATH_MAX",
    }
    return src, refused


def test_hostile_tree_packs_each_real_file_once_and_lists_every_refusal(
    hostile_tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    src, refused = hostile_tree
    dst = tmp_path / "out.lmdb"
    manifest = pack(src, dst, workers=1, skip_bad=True)
    with open_dataset(dst) as ds:
        got = sorted(zip(ds.paths, ds.labels.tolist(), strict=True))
    expected = [(f"a/ext/img{k}.jpg", 0) for k in range(2)]
    expected += [(f"a/img{k}.jpg", 0) for k in range(4)] + [(f"b/img{k}.jpg", 1) for k in range(4)]
    assert got == sorted(expected)
    skipped = {s["path"]: s["reason"] for s in json.loads((dst / "skipped.json").read_text())}
    assert sorted(skipped) == sorted(refused), (set(skipped) ^ set(refused))
    for path, word in refused.items():
        assert word in skipped[path], (path, skipped[path])
    assert manifest.stats["skipped"] == len(refused)
    assert verify(dst).ok


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as handle:
        handle.truncate(size)  # takes no disk


def _trap(src: Path, kind: str) -> str:
    """Put one trap into src (classes a, b); return a word of the reason it is refused for."""
    traps = {
        "loop": lambda: (src / "b" / "loop").symlink_to(".."),
        "self-links": lambda: [(src / "a" / n).symlink_to(".") for n in ("s1", "s2")],
        "fifo": lambda: os.mkfifo(src / "a" / "x.jpg"),
        "dev-zero": lambda: (src / "a" / "zero.jpg").symlink_to("/dev/zero"),
        "sparse": lambda: _sparse(src / "a" / "huge.jpg", 6 << 30),
    }
    traps[kind]()
    return {"loop": "inside SRC", "self-links": "inside SRC", "fifo": "not a regular file",
            "dev-zero": "not a regular file", "sparse": "max-file-size"}[kind]


@pytest.mark.parametrize("kind", ["loop", "self-links", "fifo", "dev-zero", "sparse"])
def test_each_trap_alone_is_refused_and_listed(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "src"
    _images(src / "a", 2, 0)
    _images(src / "b", 2, 5)
    word = _trap(src, kind)
    dst = tmp_path / "out.h5"
    pack(src, dst, workers=1, skip_bad=True)
    with open_dataset(dst) as ds:
        assert sorted(zip(ds.paths, ds.labels.tolist(), strict=True)) == [
            ("a/img0.jpg", 0), ("a/img1.jpg", 0), ("b/img0.jpg", 1), ("b/img1.jpg", 1)]
    skipped = json.loads((dst / "skipped.json").read_text())
    assert skipped and all(word in s["reason"] for s in skipped), skipped


@pytest.mark.parametrize("strict", [False, True])
def test_a_refused_file_stops_the_pack_by_default(tmp_path: Path, strict: bool) -> None:
    src = tmp_path / "src"
    _images(src / "a", 2, 0)
    os.mkfifo(src / "a" / "x.jpg")
    with pytest.raises(PackError, match=r"x\.jpg: not a regular file.*skip_bad=True"):
        pack(src, tmp_path / "out.h5", workers=1, strict=strict)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse", "dangling"])
def test_each_refused_data_file_stops_the_pack_unless_skip_bad(tmp_path: Path,
                                                               kind: str) -> None:
    src = tmp_path / "src"
    _images(src / "a", 2, 0)
    _images(src / "b", 2, 5)
    if kind == "dangling":
        (src / "b" / "gone.jpg").symlink_to(tmp_path / "nothing")
        word = "dangling"
    else:
        word = _trap(src, kind)
    with pytest.raises(PackError, match=f"{word}.*skip_bad=True"):
        pack(src, tmp_path / "out.h5", workers=1)
    assert main([str(src), str(tmp_path / "out.h5"), "--workers", "1", "--quiet",
                 "--skip-bad"]) == 0
    skipped = json.loads((tmp_path / "out.h5" / "skipped.json").read_text())
    assert len(skipped) == 1 and word in skipped[0]["reason"]


@pytest.mark.parametrize("kind", ["loop", "self-links", "visited"])
def test_a_folder_link_packed_anyway_is_listed_and_does_not_stop(tmp_path: Path,
                                                                  kind: str) -> None:
    # not bad data: the linked folder's files are packed once, in their own place
    src = tmp_path / "src"
    _images(src / "a", 2, 0)
    _images(src / "b", 2, 5)
    if kind == "visited":  # a folder outside SRC reached twice: packed through the first link
        outside = tmp_path / "outside"
        _images(outside, 1, 9)
        (src / "a" / "ext").symlink_to(outside)
        (src / "a" / "ext2").symlink_to(outside)
        word, extra = "already visited", {"a/ext/img0.jpg", "a/ext2/img0.jpg"}
    else:
        word, extra = _trap(src, kind), set()
    dst = tmp_path / "out.h5"
    manifest = pack(src, dst, workers=1)  # the default: stop at bad data
    with open_dataset(dst) as ds:
        got = sorted(zip(ds.paths, ds.labels.tolist(), strict=True))
    own = [("a/img0.jpg", 0), ("a/img1.jpg", 0), ("b/img0.jpg", 1), ("b/img1.jpg", 1)]
    linked = [entry for entry in got if entry not in own]  # whichever link the walk met first
    assert [entry for entry in got if entry in own] == own
    assert len(linked) == len(extra) // 2 and all(p in extra and y == 0 for p, y in linked)
    skipped = json.loads((dst / "skipped.json").read_text())
    assert skipped and all(word in s["reason"] for s in skipped), skipped
    assert manifest.stats["skipped"] == len(skipped)


def test_size_cap_flag_skips_large_files_and_can_be_raised(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _images(src / "a", 3, 0, size=24)
    (src / "a" / "big.jpg").write_bytes(encode(photo_like(200, 200, 5), quality=95))
    cap = (src / "a" / "big.jpg").stat().st_size - 1
    assert main([str(src), str(tmp_path / "small.h5"), "--max-file-size", str(cap),
                 "--workers", "1", "--quiet", "--skip-bad"]) == 0
    skipped = json.loads((tmp_path / "small.h5" / "skipped.json").read_text())
    assert [s["path"] for s in skipped] == ["a/big.jpg"] and "max-file-size" in skipped[0]["reason"]
    assert main([str(src), str(tmp_path / "all.h5"), "--max-file-size", str(cap + 1),
                 "--workers", "1", "--quiet"]) == 0
    with open_dataset(tmp_path / "all.h5") as ds:
        assert len(ds) == 4


def test_scan_keeps_torchvision_order_and_linked_class_folders(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _images(src / "a" / "z", 2, 0)
    _images(src / "a", 2, 5)
    outside = tmp_path / "cats"
    _images(outside, 2, 9)
    (src / "c").symlink_to(outside)  # a class folder that is a link: still a class
    result = scan(src)
    assert result.classes == ["a", "c"]
    assert [f.relpath for f in result.files] == [
        "a/img0.jpg", "a/img1.jpg", "a/z/img0.jpg", "a/z/img1.jpg", "c/img0.jpg", "c/img1.jpg"]
    assert not result.refused


# -- item 7: verify and the loader decode alike ------------------------------------------------

def _lying_jpeg(height: int, width: int) -> bytes:
    """A small JPEG whose SOF header claims height x width: its data ends far too soon."""
    data = bytearray(encode(photo_like(32, 32, 3), quality=90))
    sof = data.find(b"\xff\xc0")
    assert sof > 0
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


@pytest.mark.native
def test_lying_header_is_refused_by_pack_and_found_by_verify_decode(tmp_path: Path) -> None:
    import fastloader

    src = tmp_path / "src"
    _images(src / "a", 3, 0)
    (src / "a" / "liar.jpg").write_bytes(_lying_jpeg(1600, 1600))
    pack(src, tmp_path / "native.lmdb", workers=1, skip_bad=True)
    skipped = json.loads((tmp_path / "native.lmdb" / "skipped.json").read_text())
    assert [s["path"] for s in skipped] == ["a/liar.jpg"]
    assert "loader's decoder" in skipped[0]["reason"]
    # A dataset packed without the native core (Pillow accepts the file) holds it: verify
    # --decode must then say what the loader will find.
    env = os.environ | {"FASTLOADER_DISABLE_NATIVE": "1"}
    code = "import sys; from fastloader.pack.cli.main import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "pil.lmdb"),
                    "--workers", "1", "--quiet"], env=env, check=True, timeout=100)
    report = verify(tmp_path / "pil.lmdb", decode=True)
    with open_dataset(tmp_path / "pil.lmdb") as ds:
        liar = ds.paths.index("a/liar.jpg")
    assert report.bad_records == [liar] and "loader's decoder" in report.problems[0]
    assert verify(tmp_path / "pil.lmdb").ok  # its bytes are as packed: only decoding tells
    with fastloader.FastLoader(tmp_path / "pil.lmdb", batch_size=4, device="cpu",
                               transforms=[fastloader.Resize((16, 16))]) as loader, \
            pytest.raises(fastloader.DecodeError, match=r"liar\.jpg"):
        list(loader)


# -- item 9: two packs of one DST ----------------------------------------------------------------

def test_second_pack_cannot_take_over_a_finishing_pack(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _images(src / "a", 4, 0)
    dst = tmp_path / "out.lmdb"
    hold = tmp_path / "hold"
    hold.mkdir()
    first = subprocess.Popen(
        packdata_command([str(src), str(dst), "--workers", "1", "--quiet"], hold=hold),
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (hold / "waiting").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (hold / "waiting").exists(), "the first pack never reached its rename"
        # The first pack has written its manifest and is about to rename its folder.
        with pytest.raises(PackError, match="another packdata is writing"):
            pack(src, dst, workers=1)
        (hold / "go").write_text("")
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert verify(dst).ok and not (dst / ".lock").exists()
    with pytest.raises(PackError, match="already exists"):
        pack(src, dst, workers=1)


def test_dst_appearing_while_packing_is_a_clear_error_not_a_merge(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _images(src / "a", 4, 0)
    other = tmp_path / "other.lmdb"
    pack(src, other, workers=1)
    dst = tmp_path / "out.lmdb"

    def finish_another_pack_meanwhile(done: int, total: int, _: int) -> None:
        if done == total:  # as a second packdata of DST would, finishing first
            other.rename(dst)

    with pytest.raises(PackError, match="appeared while this pack ran"):
        pack(src, dst, workers=1, progress=finish_another_pack_meanwhile)
    assert verify(dst).ok  # the other pack's dataset is intact


# -- item 10: --overwrite while a reader is mid-epoch ------------------------------------------

@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_overwrite_keeps_a_running_reader_on_the_old_version(tmp_path: Path, suffix: str) -> None:
    import fastloader

    old_src, new_src = tmp_path / "old", tmp_path / "new"
    for c in "ab":
        _images(old_src / c, 6, ord(c), size=40)
    _images(new_src / "z", 30, 100, size=40)
    dst = tmp_path / f"d{suffix}"
    pack(old_src, dst, workers=1, shard_size=4000)
    with open_dataset(dst) as ds:
        assert len(ds.manifest.shards) > 2
        old_labels = ds.labels.copy()
    with fastloader.FastLoader(dst, batch_size=2, device="cpu", num_threads=1, prefetch=1,
                               transforms=[fastloader.Resize((8, 8))]) as loader:
        batches = iter(loader)
        labels = [next(batches)[1]]
        pack(new_src, dst, workers=1, overwrite=True, shard_size=4000)
        labels += [batch[1] for batch in batches]  # the rest of the pass: old shards
    assert np.concatenate([t.numpy() for t in labels]).tolist() == old_labels.tolist()
    with open_dataset(dst) as ds:
        assert len(ds) == 30 and ds.classes == ["z"]
    assert not list(tmp_path.glob(".d*.old-*"))  # the old folder was deleted
