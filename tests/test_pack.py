"""pack(): skipping broken files, strict mode, re-encoding, parallel determinism, kill + resume."""

from __future__ import annotations

import fcntl
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from fastloader.errors import InvalidArgumentError, InvalidTypeError, PackError
from fastloader.format.manifest import Codec, read_manifest
from fastloader.format.open import open_dataset
from fastloader.pack.pipeline.tree import pack
from fastloader.pack.staging.journal import staging_path
from fastloader.pack.staging.plan import ShardPlan
from faults import packdata_command
from imagegen import encode, photo_like
from treegen import add_broken_files, make_flat_tree, make_mixed_tree


def _digests(dst: Path) -> dict[str, str]:
    """Every shard's and index field's sha256: equal digests mean identical datasets."""
    manifest = read_manifest(dst)
    digests = {s.file: s.sha256 for s in manifest.shards}
    digests.update({name: f.sha256 for name, f in manifest.fields.items()})
    return digests


def test_broken_files_are_skipped_listed_and_never_packed(tmp_path: Path) -> None:
    written = make_mixed_tree(tmp_path / "src")
    broken = add_broken_files(tmp_path / "src")
    manifest = pack(tmp_path / "src", tmp_path / "out.h5", workers=1, skip_bad=True)
    with open_dataset(tmp_path / "out.h5") as ds:
        assert sorted(ds.paths) == sorted(written)
        assert not set(ds.paths) & set(broken)
    skipped = json.loads((tmp_path / "out.h5" / "skipped.json").read_text())
    assert sorted(s["path"] for s in skipped) == sorted(broken)
    reasons = {s["path"]: s["reason"] for s in skipped}
    assert reasons["dog/empty.jpg"] == "empty file"
    assert "truncated" in reasons["cat/truncated.jpg"]
    stats = manifest.stats
    assert (stats["packed"], stats["skipped"], stats["files_found"]) == (13, 4, 17)
    assert (stats["ignored_hidden"], stats["ignored_non_image"]) == (2, 1)
    assert stats["ignored_outside_classes"] == 1


@pytest.mark.parametrize("strict", [False, True])
def test_a_broken_file_stops_the_pack_by_default_and_creates_nothing(tmp_path: Path,
                                                                     strict: bool) -> None:
    make_mixed_tree(tmp_path / "src")
    (tmp_path / "src" / "cat" / "zz_garbage.jpg").write_bytes(b"\xff\xd8 not really")
    with pytest.raises(PackError, match=r"zz_garbage\.jpg.*skip_bad=True"):
        pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1, strict=strict)
    assert not (tmp_path / "out.lmdb").exists()
    with pytest.raises(PackError, match=r"strict=True and skip_bad=True contradict"):
        pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1, strict=True, skip_bad=True)


def test_all_files_broken_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "x.jpg").write_bytes(b"nope")
    with pytest.raises(PackError, match=r"no file under .* could be decoded"):
        pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1, skip_bad=True)
    assert not (tmp_path / "out.lmdb").exists()


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_parallel_pack_is_identical_to_serial(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fastloader.pack.staging.items.SampleItems.window", 7)  # many pool windows
    make_flat_tree(tmp_path / "src", classes=3, per_class=30)
    calls: list[tuple[int, int, int]] = []
    serial = pack(tmp_path / "src", tmp_path / f"one{suffix}", workers=1, shard_size=20_000)
    parallel = pack(
        tmp_path / "src",
        tmp_path / f"two{suffix}",
        workers=2,
        shard_size=20_000,
        progress=lambda *args: calls.append(args),
    )
    assert len(serial.shards) > 3
    assert _digests(tmp_path / f"one{suffix}") == _digests(tmp_path / f"two{suffix}")
    assert parallel.num_samples == 90
    assert calls[-1][:2] == (90, 90) and calls[-1][2] == parallel.stats["source_bytes"]


def test_max_side_reencodes_only_larger_images(tmp_path: Path) -> None:
    written = make_mixed_tree(tmp_path / "src")
    big_rgba = encode(photo_like(90, 120, 5), "PNG", "RGBA")
    big_cmyk = encode(photo_like(100, 70, 6), "JPEG", "CMYK", quality=90)
    (tmp_path / "src" / "eel" / "big_rgba.png").write_bytes(big_rgba)
    (tmp_path / "src" / "eel" / "big_cmyk.jpg").write_bytes(big_cmyk)
    manifest = pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1, max_side=64, quality=80)
    assert manifest.stats["reencoded"] == 3 and manifest.options["max_side"] == 64
    with open_dataset(tmp_path / "out.lmdb") as ds:
        for i, relpath in enumerate(ds.paths):
            data = bytes(ds.record(i))
            with Image.open(io.BytesIO(data)) as image:
                assert max(image.size) <= 64, relpath
                assert tuple(ds.shapes[i]) == (image.height, image.width)
            if relpath in written and max(Image.open(tmp_path / "src" / relpath).size) <= 64:
                assert data == written[relpath], relpath  # small ones keep their bytes
            else:
                assert ds.codecs[i] == Codec.JPEG and image.mode in ("RGB", "L"), relpath


def test_overwrite_replaces_a_dataset_but_never_other_folders(tmp_path: Path) -> None:
    make_flat_tree(tmp_path / "src", classes=2, per_class=3)
    pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1)
    with pytest.raises(PackError, match="already exists; pass overwrite=True to replace it"):
        pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1)
    (tmp_path / "src" / "c00" / "extra.jpg").write_bytes(encode(photo_like(8, 8, 1)))
    assert pack(tmp_path / "src", tmp_path / "out.lmdb", overwrite=True).num_samples == 7
    assert len(open_dataset(tmp_path / "out.lmdb")) == 7
    assert not list(tmp_path.glob(".out.lmdb*"))  # no staging or trash left behind
    (tmp_path / "mine.lmdb").mkdir()
    (tmp_path / "mine.lmdb" / "precious.txt").write_text("keep me")
    with pytest.raises(PackError, match="is not a packed dataset, so overwrite=True will not"):
        pack(tmp_path / "src", tmp_path / "mine.lmdb", overwrite=True)
    assert (tmp_path / "mine.lmdb" / "precious.txt").exists()


def test_bad_options_raise_typed_errors(tmp_path: Path) -> None:
    make_flat_tree(tmp_path / "src", classes=1, per_class=1)
    dst = tmp_path / "out.lmdb"
    for options in ({"shard_size": 0}, {"quality": 101}, {"workers": 0}, {"max_side": 0}):
        with pytest.raises(InvalidArgumentError):
            pack(tmp_path / "src", dst, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        pack(tmp_path / "src", dst, shard_size="1M")  # type: ignore[arg-type]
    with pytest.raises(PackError, match=r"suffix '\.h5' but format 'lmdb'"):
        pack(tmp_path / "src", tmp_path / "out.h5", format="lmdb")
    assert pack(tmp_path / "src", tmp_path / "plain", format="hdf5").backend == "hdf5"


def test_a_second_pack_into_the_same_dst_is_refused_while_one_runs(tmp_path: Path) -> None:
    make_flat_tree(tmp_path / "src", classes=1, per_class=2)
    staging = staging_path(tmp_path / "out.lmdb")
    staging.mkdir()
    with open(staging / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # what a running pack holds
        with pytest.raises(PackError, match="another packdata is writing"):
            pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1)


def _shard_inodes(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("shard-*")}


@pytest.mark.heavy
@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_killed_pack_leaves_no_dataset_and_resume_finishes_it(tmp_path: Path, suffix: str) -> None:
    make_flat_tree(tmp_path / "src", classes=2, per_class=40)
    dst = tmp_path / f"out{suffix}"
    argv = [str(tmp_path / "src"), str(dst), "--shard-size", "8K", "--workers", "2", "--quiet"]
    killed = subprocess.run(
        packdata_command(argv, kill_after_parts=3),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )
    assert killed.returncode == -9
    assert not dst.exists()
    staging = staging_path(dst)
    assert not (staging / "manifest.json").exists()
    finished = _shard_inodes(staging)
    assert len(finished) >= 3 and len(list((staging / "journal").glob("*.json"))) == 3

    from fastloader.pack.cli.main import main

    assert main([*argv, "--resume"]) == 0
    after = _shard_inodes(dst)
    reused = sorted(finished)[:3]
    assert all(after[name] == finished[name] for name in reused)  # not rewritten
    assert not staging.exists() and not (dst / "journal").exists()
    pack(tmp_path / "src", tmp_path / f"fresh{suffix}", shard_size=8 << 10, workers=1)
    assert _digests(dst) == _digests(tmp_path / f"fresh{suffix}")


class _Stop(Exception):
    pass


def _stop_after(files: int):
    def progress(done: int, total: int, nbytes: int) -> None:
        if done >= files:
            raise _Stop

    return progress


def test_resume_reuses_unchanged_shards_and_rebuilds_changed_ones(tmp_path: Path) -> None:
    make_flat_tree(tmp_path / "src", classes=2, per_class=20)
    dst, options = tmp_path / "out.lmdb", {"shard_size": 8 << 10, "workers": 1}
    with pytest.raises(_Stop):  # an exception mid-pack keeps the staging folder for --resume
        pack(tmp_path / "src", dst, progress=_stop_after(30), **options)
    staging = staging_path(dst)
    journaled = sorted(p.stem for p in (staging / "journal").glob("*.json"))
    assert len(journaled) >= 3 and not dst.exists()
    before = _shard_inodes(staging)
    first_two = [s for s in sorted(before)][:2]
    # Change a file that went into shard 1: shard 0 stays valid, shard 1 on must be rebuilt.
    plan = ShardPlan.load(staging)
    changed = plan.relpath(plan.span(1)[0])
    (tmp_path / "src" / changed).write_bytes(encode(photo_like(9, 9, 3)))
    pack(tmp_path / "src", dst, resume=True, **options)
    after = _shard_inodes(dst)
    assert after[first_two[0]] == before[first_two[0]]
    assert after[first_two[1]] != before[first_two[1]]
    with open_dataset(dst) as ds:
        i = ds.paths.index(changed)
        assert bytes(ds.record(i)) == (tmp_path / "src" / changed).read_bytes()
        assert len(ds) == 40


def test_without_resume_a_stale_staging_folder_is_replaced(tmp_path: Path) -> None:
    make_flat_tree(tmp_path / "src", classes=1, per_class=12)
    dst, options = tmp_path / "out.h5", {"shard_size": 4 << 10, "workers": 1}
    with pytest.raises(_Stop):
        pack(tmp_path / "src", dst, progress=_stop_after(8), **options)
    before = _shard_inodes(staging_path(dst))
    pack(tmp_path / "src", dst, **options)
    after = _shard_inodes(dst)
    assert before and all(after[name] != before[name] for name in before)


def test_fastloader_pack_is_callable_even_after_submodule_imports(tmp_path: Path) -> None:
    import fastloader
    import fastloader.pack.cli.main  # binds the subpackage to fastloader.pack

    make_flat_tree(tmp_path / "src", classes=1, per_class=2)
    manifest = fastloader.pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1)
    assert manifest.num_samples == 2 and callable(fastloader.pack)


def test_pool_workers_end_on_terminate_under_an_inherited_sigterm_handler(tmp_path: Path) -> None:
    # ray.init installs a Python SIGTERM handler and leaves it after shutdown: forked pool
    # workers inherited it, and a pack stopped by a bad file (its pool terminated while
    # workers waited for work) hung for good in Pool.terminate(). Run in a child, so a hang
    # is a timeout here (SIGKILL: the child ignores SIGTERM).
    make_flat_tree(tmp_path / "tree", classes=2, per_class=300)
    (tmp_path / "tree" / "c00" / "img_0000a.jpg").write_bytes(b"not a jpeg")
    script = f"""
import pathlib, signal, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from helpers import sample_table
import fastloader
from fastloader.errors import PackError
signal.signal(signal.SIGTERM, lambda *args: None)
tmp = pathlib.Path({str(tmp_path)!r})
table = sample_table(tmp / "src", 300, bad=(2,))
for source, options in ((tmp / "tree", {{"strict": True}}), (table, {{"label": "species"}})):
    try:
        fastloader.pack(source, tmp / "out.lmdb", workers=2, **options)
    except PackError:
        print("stopped", flush=True)
"""
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        import psutil

        for process in [*psutil.Process(child.pid).children(recursive=True), child]:
            process.kill()
        out, err = child.communicate()
        pytest.fail("a pack with an inherited SIGTERM handler hung in Pool.terminate()")
    assert out.count("stopped") == 2, err[-2000:]
