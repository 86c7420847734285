"""Gzipped WebDataset shards (.tgz, .tar.gz, written by webdataset's own TarWriter) pack every
group WebDataset reads, alone, by brace pattern or as a folder; a gzip tar forced as `tar` is
read; .gz members are un-gzipped as WebDataset does; a truncated tar or gzip stream is named
as truncated, at its byte."""

from __future__ import annotations

import gzip
import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fastloader
from fastloader import open_dataset
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from fastloader.pack.sources.importers import detect

webdataset = pytest.importorskip("webdataset", reason="webdataset is a test dependency")

GROUPS = 5  # per shard


def png(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (10 + seed % 4, 8), (seed * 37 % 256, 60, 120)).save(buffer, "PNG")
    return buffer.getvalue()


def write_shard(path: Path, first: int, gz_text: bool = False) -> list[dict[str, bytes]]:
    """GROUPS samples written by webdataset.TarWriter (gzipped when path ends in gz); each a
    png, a class and a caption (a gzipped .txt.gz member when gz_text)."""
    samples = [{"__key__": f"s{first + k:05d}", "png": png(first + k),
                "cls": str((first + k) % 3).encode(), "txt": f"caption {first + k}".encode()}
               for k in range(GROUPS)]
    with webdataset.TarWriter(str(path), encoder=False) as sink:
        for sample in samples:
            if gz_text:
                sample = {k: v for k, v in sample.items() if k != "txt"} | {
                    "txt.gz": gzip.compress(sample["txt"])}
            sink.write(sample)
    return samples


def webdataset_reads(pattern: str) -> list[dict[str, bytes]]:
    """The samples webdataset itself reads (its gz decoder un-gzips .gz members)."""
    reader = webdataset.WebDataset(pattern, shardshuffle=False, empty_check=False).decode()
    return [{k: v for k, v in s.items() if not k.startswith("__")} for s in reader]


def check(dst: Path, expected: list[dict[str, bytes]]) -> None:
    with open_dataset(dst) as ds:
        assert len(ds) == len(expected)
        for k, sample in enumerate(expected):
            got = ds.sample(k)
            assert got["png"] == sample["png"] and got["cls"] == int(sample["cls"])
            assert got["txt"] == sample["txt"].decode()


def test_a_tgz_shard_packs_every_group_webdataset_reads(tmp_path: Path) -> None:
    written = write_shard(tmp_path / "a.tgz", 0)
    assert (tmp_path / "a.tgz").read_bytes()[:2] == b"\x1f\x8b"  # TarWriter gzipped it
    assert len(webdataset_reads(str(tmp_path / "a.tgz"))) == GROUPS
    assert detect(tmp_path / "a.tgz", None) == "tar"
    assert main([str(tmp_path / "a.tgz"), str(tmp_path / "o.lmdb"), "--quiet",
                 "--workers", "2"]) == 0
    check(tmp_path / "o.lmdb", written)
    assert main(["verify", str(tmp_path / "o.lmdb"), "--decode", "--quiet"]) == 0


def test_a_brace_pattern_and_a_folder_of_tar_gz_shards(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    written = [s for t in range(3)
               for s in write_shard(shards / f"d-{t:03d}.tar.gz", t * GROUPS)]
    pattern = str(shards / "d-{000..002}.tar.gz")
    assert len(webdataset_reads(pattern)) == 3 * GROUPS
    assert main([pattern, str(tmp_path / "p.lmdb"), "--quiet", "--workers", "2"]) == 0
    check(tmp_path / "p.lmdb", written)
    assert main([str(shards), str(tmp_path / "f.lmdb"), "--quiet", "--workers", "2"]) == 0
    check(tmp_path / "f.lmdb", written)  # the folder's shards in name order
    # --resume knows the shards again (their names, sizes and mtimes)
    assert main([pattern, str(tmp_path / "p.lmdb"), "--quiet", "--overwrite", "--resume"]) == 0


def test_a_gzip_tar_of_any_name_is_read_under_source_format_tar(tmp_path: Path) -> None:
    written = write_shard(tmp_path / "a.tgz", 0)
    shutil.move(tmp_path / "a.tgz", tmp_path / "named.tar")  # gzip inside, .tar outside
    manifest = fastloader.pack(tmp_path / "named.tar", tmp_path / "o.lmdb", workers=1,
                               source_format="tar")
    assert manifest.num_samples == GROUPS
    check(tmp_path / "o.lmdb", written)


def test_gz_members_are_un_gzipped_as_webdataset_does(tmp_path: Path) -> None:
    written = write_shard(tmp_path / "a.tar", 0, gz_text=True)
    read = webdataset_reads(str(tmp_path / "a.tar"))
    assert read[0]["txt.gz"] == "caption 0"  # webdataset: its name kept, decompressed text
    fastloader.pack(tmp_path / "a.tar", tmp_path / "o.lmdb", workers=1)
    with open_dataset(tmp_path / "o.lmdb") as ds:
        assert list(ds.fields) == ["png", "cls", "txt.gz"]
        assert ds.fields["txt.gz"].kind.name == "text"
        assert [ds.sample(k)["txt.gz"] for k in range(GROUPS)] == [
            s["txt"].decode() for s in written] == [r["txt.gz"] for r in read]


def test_truncated_tars_and_gzip_streams_say_truncated_at_byte(tmp_path: Path) -> None:
    write_shard(tmp_path / "a.tar", 0)
    data = (tmp_path / "a.tar").read_bytes()
    # cut right after the 4th group's png: a clean member boundary, its cls and txt lost
    import tarfile

    with tarfile.open(tmp_path / "a.tar") as tar:
        member = tar.getmember("s00003.png")
    end = member.offset_data + -(-member.size // 512) * 512
    (tmp_path / "cut.tar").write_bytes(data[:end])
    manifest = fastloader.pack(tmp_path / "cut.tar", tmp_path / "o.lmdb", workers=1,
                               skip_bad=True)
    assert manifest.num_samples == 3  # the group cut short is not packed without its fields
    reasons = [s["reason"] for s in manifest.stats["skipped_samples"]]
    assert reasons == [f"{tmp_path / 'cut.tar'}: truncated at byte {end}: the tar stops "
                       "(after member group 's00003') before its end-of-archive block"]
    with pytest.raises(PackError, match=f"cut.tar: truncated at byte {end}"):
        fastloader.pack(tmp_path / "cut.tar", tmp_path / "p.lmdb", workers=1)
    packed = gzip.compress(data)
    (tmp_path / "cut.tgz").write_bytes(packed[: len(packed) * 2 // 3])
    with pytest.raises(PackError, match=r"cut.tgz: truncated at byte \d+.*the gzip stream is "
                       rf"cut short: .*cut.tgz ends at byte {len(packed) * 2 // 3}"):
        fastloader.pack(tmp_path / "cut.tgz", tmp_path / "q.lmdb", workers=1)


def test_a_decompressed_copy_is_gone_with_its_index(tmp_path: Path) -> None:
    from fastloader.pack.sources.groups import open_tars

    write_shard(tmp_path / "a.tgz", 0)
    samples = open_tars(str(tmp_path / "a.tgz"), None)[0]
    index = samples.tar_index
    copy = Path(index.readable[0])
    assert copy != tmp_path / "a.tgz" and copy.is_file()
    assert index.tars == [str(tmp_path / "a.tgz")]  # errors and fingerprints name the .tgz
    assert np.all(index.group_tar == 0) and len(samples) == GROUPS
    del samples, index
    import gc

    gc.collect()
    assert not copy.exists()


def test_a_tar_cut_after_a_long_name_header_says_truncated(tmp_path: Path) -> None:
    """A member with a long name has a pax header before its own; a tar that ends between the
    two (tarfile: "empty header") is truncated, not damaged, wherever the cut falls."""
    import io
    import tarfile

    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (5, 4), (9, 80, 200)).save(png, format="PNG")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for k in range(3):
            for suffix, data in (("png", png.getvalue()), ("cls", str(k).encode())):
                info = tarfile.TarInfo(f"s{k:05d}{'x' * 120}.{suffix}")  # > 100 bytes: pax
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with tarfile.open(fileobj=io.BytesIO(buffer.getvalue())) as tar:
        third = tar.getmembers()[4]  # the third group's png
    end = third.offset + 1024  # the pax header and its record: the member's own header lost
    (tmp_path / "cut.tar").write_bytes(buffer.getvalue()[:end])
    manifest = fastloader.pack(tmp_path / "cut.tar", tmp_path / "o.lmdb", workers=1,
                               skip_bad=True)
    assert manifest.num_samples == 1  # the group before the cut may have lost members
    reasons = [s["reason"] for s in manifest.stats["skipped_samples"]]
    assert reasons == [f"{tmp_path / 'cut.tar'}: truncated at byte {end}: the tar stops after "
                       f"member group 's00001{'x' * 120}' before the next member's header"]
