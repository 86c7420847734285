"""--engine ray with a real local Ray instance (started and shut down here, on loopback): the
same dataset as the local engine, byte for byte, and a shard task killed mid-shard is retried
by Ray into a correct dataset. Skipped where Ray is not installed (the `ray` extra)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import fastloader
from fastloader.errors import PackError
from fastloader.pack.maintain.verify import verify
from fastloader.pack.pipeline.tree import pack
from fastloader.pack.staging.journal import staging_path
from faults import patch_ray_task
from helpers import (
    broken_tree,
    coco_file,
    dataset_bytes,
    remote_dataset_bytes,
    sample_table,
    upload_tree,
)
from imagegen import encode, photo_like
from servers import s3_server

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'fastloader[ray]')")
SHARD = 20_000  # bytes: the 90-file tree makes 6 shards
_ENV = {"RAY_AUTH_MODE": "disabled",  # a loopback test instance: no token under ~/.ray
        "RAY_USAGE_STATS_ENABLED": "0"}


pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def ray_instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local Ray instance (2 CPUs) for this module; yields a folder for the kill fault's
    flag (faults.faulty: armed once the folder exists)."""
    flags = tmp_path_factory.mktemp("ray-hook") / "armed"
    env = _ENV
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1")
        yield flags
    finally:
        ray.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert not ray.is_initialized()


def test_ray_and_local_engines_write_the_same_dataset(tmp_path: Path, ray_instance: Path) -> None:
    written = broken_tree(tmp_path / "src")
    calls: list[tuple[int, int, int]] = []
    by_ray = pack(tmp_path / "src", tmp_path / "ray.lmdb", skip_bad=True,
                  engine="ray", shard_size=SHARD,
                  progress=lambda *args: calls.append(args))
    pack(tmp_path / "src", tmp_path / "local.lmdb", skip_bad=True, workers=1, shard_size=SHARD)
    assert len(by_ray.shards) >= 4 and by_ray.num_samples == len(written)
    assert dataset_bytes(tmp_path / "ray.lmdb") == dataset_bytes(tmp_path / "local.lmdb")
    assert calls[-1][:2] == (len(written) + 2, len(written) + 2)  # files found, on the driver
    assert not (ray_instance / "died").exists()
    with pytest.raises(PackError, match=r"a_broken\.jpg.*skip_bad=True"):  # a task's own
        pack(tmp_path / "src", tmp_path / "strict.lmdb", engine="ray", strict=True)


@pytest.mark.native_neutral
def test_a_task_killed_mid_shard_is_retried_into_a_correct_dataset(
    tmp_path: Path, ray_instance: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken_tree(tmp_path / "src")
    patch_ray_task(monkeypatch.setattr, die_in=1, flag=ray_instance / "died")
    ray_instance.mkdir()  # arms the fault: shard 1's first attempt dies with a torn shard
    pack(tmp_path / "src", tmp_path / "ray.h5", skip_bad=True, engine="ray", shard_size=SHARD)
    assert (ray_instance / "died").exists()  # it did die, and Ray ran it again
    pack(tmp_path / "src", tmp_path / "local.h5", skip_bad=True, workers=2, shard_size=SHARD)
    assert dataset_bytes(tmp_path / "ray.h5") == dataset_bytes(tmp_path / "local.h5")
    assert verify(tmp_path / "ray.h5").ok


@pytest.mark.native_neutral
def test_packdata_engine_ray_starts_and_stops_its_own_instance(tmp_path: Path) -> None:
    broken_tree(tmp_path / "src", classes=2, per_class=10)
    argv = [str(tmp_path / "src"), str(tmp_path / "ray.lmdb"), "--engine", "ray",
            "--workers", "2", "--shard-size", "8K", "--quiet", "--skip-bad"]
    ran = subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", *argv],
                         env={**os.environ, **_ENV}, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr
    pack(tmp_path / "src", tmp_path / "local.lmdb", skip_bad=True, shard_size=8 << 10)
    assert dataset_bytes(tmp_path / "ray.lmdb") == dataset_bytes(tmp_path / "local.lmdb")


def test_sample_sources_pack_the_same_on_ray(tmp_path: Path, ray_instance: Path) -> None:
    """A table, COCO, a tar and file groups (reopened in the tasks from the plan) and Python
    samples (ray.put)."""
    table = sample_table(tmp_path / "src", 30, bad=(3,))
    coco = coco_file(tmp_path / "coco")
    samples = [{"image": (tmp_path / "src" / "img" / f"{k}.jpg").read_bytes(), "y": k}
               for k in range(4, 20)]
    (tmp_path / "groups").mkdir()
    with tarfile.open(tmp_path / "w.tar", "w") as tar:  # the same groups as a tar
        for k in range(12):
            for name, data in ((f"s{k:02d}.jpg", (tmp_path / "src" / "img" / f"{k}.jpg")
                                .read_bytes()), (f"s{k:02d}.cls", b"%d" % (k % 2))):
                (tmp_path / "groups" / name).write_bytes(data)
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    packs = {"t": (table, {"label": "species", "skip_bad": True, "shard_size": 4 << 10}),
             "c": (coco, {"masks": True, "shard_size": 8 << 10}),
             "w": (tmp_path / "w.tar", {"shard_size": 3 << 10, "skip_bad": True}),
             "g": (tmp_path / "groups", {"shard_size": 3 << 10, "skip_bad": True}),
             "p": (samples, {"fields": {"image": "image", "y": "int"}, "shard_samples": 5})}
    for name, (src, options) in packs.items():
        by_ray = fastloader.pack(src, tmp_path / f"{name}-ray.lmdb", engine="ray", **options)
        fastloader.pack(src, tmp_path / f"{name}-local.lmdb", workers=1, **options)
        assert len(by_ray.shards) >= 3, name
        assert dataset_bytes(tmp_path / f"{name}-ray.lmdb") == \
            dataset_bytes(tmp_path / f"{name}-local.lmdb"), name
    with pytest.raises(PackError, match="needs samples it can read by index"):
        fastloader.pack(iter(samples), tmp_path / "i.lmdb", fields={"image": "image", "y": "int"},
                        engine="ray")
    import threading

    locked = [*samples[:2], {"image": samples[2]["image"], "y": threading.Lock()}]
    with pytest.raises(PackError, match="does not pickle"):
        fastloader.pack(locked, tmp_path / "l.lmdb", fields={"image": "image", "y": "int"},
                        engine="ray")


def test_python_samples_keyed_by_ray_tasks_resume_locally(tmp_path: Path,
                                                         ray_instance: Path) -> None:
    """Each Ray task keys the Python samples it prepares as the driver's resume check reads
    them: every part is reused but the changed sample's."""
    samples = [{"image": encode(photo_like(16, 20, k)), "y": k} for k in range(6)]
    python = {"fields": {"image": "image", "y": "int"}, "shard_samples": 1}
    dst = tmp_path / "out.lmdb"

    def stop(done: int, total: int, nbytes: int) -> None:
        if done >= total:  # every task done, before the commit
            raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="simulated"):
        fastloader.pack(samples, dst, engine="ray", progress=stop, **python)
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(staging_path(dst).glob("shard-*"))}
    assert len(kept) == 6
    samples[2] = {"image": encode(photo_like(16, 21, 99)), "y": 2}
    fastloader.pack(samples, dst, workers=1, resume=True, **python)
    rebuilt = {k for k, name in enumerate(kept)
               if ((dst / name).stat().st_ino, (dst / name).stat().st_mtime_ns) != kept[name]}
    assert rebuilt == {2}
    fastloader.pack(samples, tmp_path / "fresh.lmdb", workers=1, **python)
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "fresh.lmdb")


@pytest.mark.native_neutral
def test_a_sample_task_killed_mid_shard_is_retried(tmp_path: Path, ray_instance: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    table = sample_table(tmp_path / "src", 30)
    patch_ray_task(monkeypatch.setattr, die_in=1, flag=ray_instance / "died")
    ray_instance.mkdir(exist_ok=True)  # arms the fault: shard 1's first attempt dies
    (ray_instance / "died").unlink(missing_ok=True)
    try:
        fastloader.pack(table, tmp_path / "ray.h5", engine="ray", shard_size=4 << 10)
        assert (ray_instance / "died").exists()  # it did die, and Ray ran it again
    finally:
        (ray_instance / "died").unlink(missing_ok=True)
        ray_instance.rmdir()  # disarmed again for the other tests
    fastloader.pack(table, tmp_path / "local.h5", workers=2, shard_size=4 << 10)
    assert dataset_bytes(tmp_path / "ray.h5") == dataset_bytes(tmp_path / "local.h5")
    assert verify(tmp_path / "ray.h5").ok


def test_ray_tasks_pack_to_s3_the_same_dataset(
    tmp_path: Path, ray_instance: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SRC and DST at URLs: each task reads its files and uploads its own shard and part from
    its worker (which has none of the driver's environment: the endpoint and keys travel in
    storage_options)."""
    pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
    broken_tree(tmp_path / "src")
    pack(tmp_path / "src", tmp_path / "local.lmdb", skip_bad=True, workers=1, shard_size=SHARD)
    with s3_server(monkeypatch) as endpoint:
        import s3fs

        s3fs.S3FileSystem().mkdir("bucket")
        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
        calls: list[tuple[int, int, int]] = []
        upload_tree(tmp_path / "src", "s3://bucket/tree")
        pack("s3://bucket/tree", "s3://bucket/ray.lmdb", skip_bad=True,
             engine="ray", shard_size=SHARD,
             storage_options=options, progress=lambda *args: calls.append(args))
        assert remote_dataset_bytes("s3://bucket/ray.lmdb") == dataset_bytes(
            tmp_path / "local.lmdb")
    assert calls[-1][:2] == (92, 92)  # progress on the driver


def test_ray_tasks_pack_a_table_to_s3_with_storage_options_only(
    tmp_path: Path, ray_instance: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table with a bad row, and Python samples, to an s3:// DST: each Ray task uploads its
    own shard and sample part; the endpoint and keys reach the driver and the tasks in
    storage_options alone."""
    pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
    table = sample_table(tmp_path / "src", 30, bad=(3,))
    options = {"label": "species", "skip_bad": True, "shard_size": 4 << 10}
    fastloader.pack(table, tmp_path / "local.lmdb", workers=1, **options)
    with s3_server(monkeypatch) as endpoint:
        import s3fs

        s3fs.S3FileSystem().mkdir("bucket")
        for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)  # no environment: storage_options only
        s3fs.S3FileSystem.clear_instance_cache()
        keys = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
        by_ray = fastloader.pack(table, "s3://bucket/t.lmdb", engine="ray",
                                 storage_options=keys, **options)
        assert len(by_ray.shards) >= 3
        assert remote_dataset_bytes("s3://bucket/t.lmdb", **keys) == dataset_bytes(
            tmp_path / "local.lmdb")
        assert not s3fs.S3FileSystem(**keys).exists("bucket/.t.lmdb.partial")
        samples = [{"image": (tmp_path / "src" / "img" / f"{k}.jpg").read_bytes(), "y": k}
                   for k in range(4, 12)]  # Python samples: to the tasks by ray.put
        python = {"fields": {"image": "image", "y": "int"}, "shard_samples": 3}
        fastloader.pack(samples, tmp_path / "p.lmdb", workers=1, **python)
        fastloader.pack(samples, "s3://bucket/p.lmdb", engine="ray", storage_options=keys,
                        **python)
        assert remote_dataset_bytes("s3://bucket/p.lmdb", **keys) == dataset_bytes(
            tmp_path / "p.lmdb")
