"""An ImageFolder pack straight to a URL (moto's S3 server on 127.0.0.1): shard tasks upload
their shard and part files, the commit checks the remote parts and writes manifest.json last.
The same dataset as a local pack, byte for byte; refusals name the shard; --resume redoes only
the missing parts; --overwrite rules; FastLoader reads the result."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fastloader.errors import PackError
from fastloader.pack.engines.local import run_local
from fastloader.pack.engines.progress import Meter
from fastloader.pack.pipeline.drive import plan_source
from fastloader.pack.pipeline.options import PackOptions
from fastloader.pack.pipeline.tree import pack, tree_source
from fastloader.pack.staging.commit import commit
from fastloader.pack.staging.items import items_of
from fastloader.pack.staging.part import identity
from fastloader.pack.staging.remote_stage import RemoteStaging, staging_url
from faults import packdata_command
from helpers import broken_tree, dataset_bytes, remote_dataset_bytes, upload_tree

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
URL = "s3://bucket/train.lmdb"
SHARD = 20_000  # bytes: the 94-file tree makes 5 shards


pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree (src/) and its local pack (local.lmdb), the reference for every URL pack."""
    root = tmp_path_factory.mktemp("urls")
    broken_tree(root / "src")
    for folder in ("sub", "sub-x"):  # the listing's order: folder by folder, then names
        (root / "src" / "c02" / folder).mkdir()
        image = (root / "src" / "c02" / "img_0001.jpg").read_bytes()
        (root / "src" / "c02" / folder / "img_0000.jpg").write_bytes(image)
    for name in (".hidden.jpg", "readme.md", "c00/notes.txt", "c01/.DS_Store",
                 ".git/a.jpg", ".git/b.jpg", "c02/.cache/x.jpg", "c02/.cache/y.jpg"):
        (root / "src" / name).parent.mkdir(exist_ok=True)
        (root / "src" / name).write_bytes(b"ignored")
    pack(root / "src", root / "local.lmdb", skip_bad=True, shard_size=SHARD, workers=1)
    return root


def test_a_pack_to_s3_equals_the_local_pack_and_loads(s3, local: Path) -> None:
    manifest = pack(local / "src", URL, skip_bad=True, shard_size=SHARD, workers=2)
    assert len(manifest.shards) == 5
    assert remote_dataset_bytes(URL) == dataset_bytes(local / "local.lmdb")
    s3.invalidate_cache()
    assert not s3.exists(staging_url(URL)[5:])  # the staging prefix is gone
    from fastloader.loader.loader import FastLoader
    from helpers import train_transforms

    loader = FastLoader(URL, batch_size=8, transforms=train_transforms(), num_threads=1)
    try:
        labels = sorted(int(y) for _, batch in loader for y in batch)
    finally:
        loader.close()
    assert len(labels) == manifest.num_samples == 92


def _planned(src: Path) -> tuple[RemoteStaging, object, dict]:
    """A URL pack's plan with every part uploaded by the local engine, not committed."""
    options = PackOptions(shard_size=SHARD, skip_bad=True).checked()
    staging, plan, settings = plan_source(tree_source(src, options), URL, options)
    assert isinstance(staging, RemoteStaging)
    items = items_of(plan, settings)
    todo = staging.pending(plan, False, identity(items, plan))
    run_local(staging.stage, plan, todo, items, settings, 1, Meter(plan, todo, None, True))
    return staging, plan, settings


def test_the_commit_refuses_a_deleted_remote_part_or_shard_naming_it(s3, local: Path) -> None:
    staging, plan, settings = _planned(local / "src")
    partial = staging_url(URL)[5:]
    try:
        s3.rm_file(f"{partial}/journal/00002.json")
        s3.rm_file(f"{URL[5:]}/shard-00004.mdb")
        with pytest.raises(PackError, match=r"2 of 5 .*shard 2 .*never written.*shard 4 "
                           r".*shard-00004\.mdb missing"):
            commit(staging, plan, settings, False)
    finally:
        staging.release()
    s3.invalidate_cache()
    assert not s3.exists(f"{URL[5:]}/manifest.json")  # nothing published


def test_a_damaged_remote_index_part_is_refused(s3, local: Path) -> None:
    staging, plan, settings = _planned(local / "src")
    try:
        name = f"{staging_url(URL)[5:]}/journal/00001.part.npz"
        s3.pipe_file(name, s3.cat_file(name) + b"x")
        with pytest.raises(PackError, match=r"shard 1 .*damaged index arrays"):
            commit(staging, plan, settings, False)
    finally:
        staging.release()


def test_resume_after_a_killed_pack_uploads_only_the_missing_parts(s3, local: Path) -> None:
    argv = [str(local / "src"), URL, "--shard-size", str(SHARD), "--workers", "1", "--quiet",
            "--skip-bad"]
    ran = subprocess.run(packdata_command(argv, kill_after_parts=2), capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == -9, ran.stderr  # SIGKILLed after 2 parts
    s3.invalidate_cache()
    assert not s3.exists(f"{URL[5:]}/manifest.json")
    assert len(s3.glob(f"{staging_url(URL)[5:]}/journal/*.json")) == 2
    calls: list[tuple[int, int, int]] = []
    pack(local / "src", URL, skip_bad=True, shard_size=SHARD, workers=1, resume=True,
         progress=lambda *args: calls.append(args))
    assert calls[0][0] == 40 + 1  # shards 0 and 1 (files 0..39) were kept, not redone
    assert len(calls) == 94 - 40
    assert remote_dataset_bytes(URL) == dataset_bytes(local / "local.lmdb")


def test_overwrite_rules(s3, local: Path) -> None:
    pack(local / "src", URL, skip_bad=True, shard_size=SHARD, workers=1)
    with pytest.raises(PackError, match="already holds a packed dataset; pass --overwrite"):
        pack(local / "src", URL, skip_bad=True, shard_size=4 * SHARD, workers=1)
    manifest = pack(local / "src", URL, skip_bad=True,
                    shard_size=4 * SHARD, workers=1, overwrite=True)
    assert len(manifest.shards) == 2  # the old shards 2..4 are strays now: deleted
    named = {s.file for s in manifest.shards} | {f.file for f in manifest.fields.values()}
    assert set(remote_dataset_bytes(URL)) == named | {"manifest.json", "skipped.json"}
    s3.pipe_file("bucket/notes.lmdb/readme.txt", b"mine")
    with pytest.raises(PackError, match=r"not a packed dataset's .*readme\.txt"):
        pack(local / "src", "s3://bucket/notes.lmdb", skip_bad=True, workers=1, overwrite=True)
    assert s3.cat_file("bucket/notes.lmdb/readme.txt") == b"mine"
    with pytest.raises(PackError, match=r"DST s3://bucket/in\.lmdb is inside SRC s3://bucket"):
        pack("s3://bucket/", "s3://bucket/in.lmdb", skip_bad=True, workers=1)


def test_a_tree_at_an_s3_url_packs_the_same_dataset(s3, local: Path, tmp_path: Path) -> None:
    upload_tree(local / "src", "s3://bucket/tree")
    pack("s3://bucket/tree", tmp_path / "from-s3.lmdb", skip_bad=True, shard_size=SHARD, workers=2)
    assert dataset_bytes(tmp_path / "from-s3.lmdb") == dataset_bytes(local / "local.lmdb")
    stats = json.loads((tmp_path / "from-s3.lmdb" / "manifest.json").read_text())["stats"]
    ignored = ("ignored_hidden", "ignored_non_image", "ignored_outside_classes")
    assert [stats[name] for name in ignored] == [4, 1, 1]  # as the folder's (equal above)


def test_an_object_gone_after_the_listing_is_skipped_and_listed(s3, local: Path,
                                                                 tmp_path: Path) -> None:
    upload_tree(local / "src", "s3://bucket/tree")
    options = PackOptions(shard_size=SHARD, skip_bad=True).checked()
    staging, plan, settings = plan_source(tree_source("s3://bucket/tree", options),
                                          tmp_path / "x.lmdb", options)
    try:
        s3.rm_file("bucket/tree/c02/img_0003.jpg")
        todo = list(range(plan.num_shards))
        run_local(staging.dir, plan, todo, items_of(plan, settings), settings, 1,
                  Meter(plan, todo, None, True))
        manifest = commit(staging, plan, settings, False)
    finally:
        staging.release()
    skipped = json.loads((tmp_path / "x.lmdb" / "skipped.json").read_text())
    assert [s["reason"].startswith("cannot read: ") for s in skipped
            if s["path"] == "c02/img_0003.jpg"] == [True]
    assert manifest.num_samples == 91


def test_packdata_to_a_url_summarises_and_plan_refuses_one(s3, local: Path, capsys) -> None:
    from fastloader.pack.cli.main import main as packdata

    assert packdata([str(local / "src"), URL, "--shard-size", str(SHARD), "--workers", "1",
                     "--skip-bad"]) == 0
    err = capsys.readouterr().err
    assert f"packed 92 images into {URL}" in err
    assert f"skipped 2 unreadable files (all in {URL}/skipped.json)" in err
    assert "  c01/a_empty.jpg: empty file" in err  # read back from the URL
    assert packdata(["plan", str(local / "src"), "s3://bucket/other.lmdb"]) == 2
    assert "take a folder DST, not s3://bucket/other.lmdb" in capsys.readouterr().err


def test_file_urls_as_src_and_dst_pack_the_same_dataset(local: Path, tmp_path: Path) -> None:
    pack(f"file://{local}/src", f"file://{tmp_path}/url.lmdb", skip_bad=True,
         shard_size=SHARD, workers=1)
    assert dataset_bytes(tmp_path / "url.lmdb") == dataset_bytes(local / "local.lmdb")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["url.lmdb"]  # no staging left
    sizes = sorted(p.stat().st_size for p in (local / "src").rglob("*.jpg"))
    cap = sizes[len(sizes) // 2]  # half the files are refused by the listing, in its order
    pack(f"file://{local}/src", tmp_path / "capped-url.lmdb", skip_bad=True,
         max_file_size=cap, workers=1)
    pack(local / "src", tmp_path / "capped.lmdb", skip_bad=True, max_file_size=cap, workers=1)
    assert dataset_bytes(tmp_path / "capped-url.lmdb") == dataset_bytes(tmp_path / "capped.lmdb")
    skipped = json.loads((tmp_path / "capped.lmdb" / "skipped.json").read_text())
    assert sum("--max-file-size" in s["reason"] for s in skipped) > 10


def test_a_dataset_that_appeared_meanwhile_is_not_touched(s3, local: Path) -> None:
    staging, plan, settings = _planned(local / "src")
    try:
        s3.pipe_file(f"{URL[5:]}/manifest.json", b"{}")  # another pack finished first
        with pytest.raises(PackError, match="appeared while this pack ran"):
            commit(staging, plan, settings, False)
    finally:
        staging.release()
    s3.invalidate_cache()
    assert s3.cat_file(f"{URL[5:]}/manifest.json") == b"{}"
    assert not s3.exists(f"{URL[5:]}/index")  # nothing of ours uploaded over it
