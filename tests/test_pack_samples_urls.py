"""A sample pack (a table, COCO) straight to a URL (moto's S3 server on 127.0.0.1): each shard
task uploads its shard and sample part, the commit joins the downloaded parts and writes
manifest.json last. The same dataset as a local pack, byte for byte; a missing part is named;
--resume redoes only the missing parts; FastLoader reads the fields back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import fastloader
from fastloader.errors import PackError
from fastloader.pack.engines.local import run_local
from fastloader.pack.engines.progress import Meter
from fastloader.pack.pipeline.drive import plan_source
from fastloader.pack.pipeline.options import PackOptions
from fastloader.pack.pipeline.samples import SampleSource, sample_options
from fastloader.pack.sources import importers
from fastloader.pack.staging.commit import commit
from fastloader.pack.staging.items import items_of
from fastloader.pack.staging.part import identity
from fastloader.pack.staging.remote_stage import RemoteStaging, staging_url
from faults import packdata_command
from helpers import coco_file, dataset_bytes, remote_dataset_bytes, sample_table

pytest.importorskip("fsspec", reason="fsspec is not installed (the [s3] extra)")
URL = "s3://bucket/table.lmdb"
TABLE = {"label": "species", "skip_bad": True, "shard_size": 4 << 10}  # 30 rows: 5+ shards


pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table with a bad row and a COCO file, and their local packs (the references)."""
    root = tmp_path_factory.mktemp("sample-urls")
    sample_table(root / "src", 30, bad=(3,))
    coco_file(root / "coco")
    fastloader.pack(root / "src" / "t.csv", root / "table.lmdb", workers=1, **TABLE)
    fastloader.pack(root / "coco" / "instances.json", root / "coco.h5", workers=1, masks=True,
                    shard_size=8 << 10)
    return root


def test_a_table_and_coco_packed_to_s3_equal_local_packs_and_load(s3, local: Path) -> None:
    manifest = fastloader.pack(local / "src" / "t.csv", URL, workers=2, **TABLE)
    assert len(manifest.shards) >= 3 and manifest.stats["skipped"] == 1
    assert remote_dataset_bytes(URL) == dataset_bytes(local / "table.lmdb")
    coco = "s3://bucket/coco.h5"
    fastloader.pack(local / "coco" / "instances.json", coco, workers=1, masks=True,
                    shard_size=8 << 10)
    assert remote_dataset_bytes(coco) == dataset_bytes(local / "coco.h5")
    s3.invalidate_cache()
    assert not s3.exists(staging_url(URL)[5:]) and not s3.exists(staging_url(coco)[5:])
    with fastloader.FastLoader(URL, batch_size=8, device="cpu", num_threads=1,
                               transforms=[fastloader.Resize((8, 8))],
                               fields=["note", "size"]) as loader:
        rows = sorted((note, float(size)) for notes, sizes in loader
                      for note, size in zip(notes, sizes.tolist(), strict=True))
    assert rows == sorted((f"note {k}", k * 0.5) for k in range(30) if k != 3)


def test_storage_options_are_refused_with_a_folder_dst(local: Path, tmp_path: Path) -> None:
    with pytest.raises(PackError, match=r"storage_options applies to a URL SRC or DST"):
        fastloader.pack(local / "src" / "t.csv", tmp_path / "t.lmdb", workers=1,
                        storage_options={"anon": True}, **TABLE)


def test_the_commit_refuses_a_deleted_remote_part_naming_it(s3, local: Path) -> None:
    table = local / "src" / "t.csv"
    samples, specs, source = importers.open_source(
        table, "csv", fields=None, image=None, label="species", root=None)
    opts = sample_options(PackOptions(workers=1, skip_bad=True, shard_size=4 << 10).checked(),
                          source)
    staging, plan, settings = plan_source(SampleSource(samples, specs, source, None), URL, opts)
    assert isinstance(staging, RemoteStaging) and plan is not None
    try:
        items = items_of(plan, settings, samples)
        todo = staging.pending(plan, False, identity(items, plan))
        run_local(staging.stage, plan, todo, items, settings, 1, Meter(plan, todo, None, True))
        s3.rm_file(f"{staging_url(URL)[5:]}/journal/00002.json")
        with pytest.raises(PackError, match=r"cannot commit s3://bucket/table\.lmdb: 1 of "
                           r"\d+ .*shard 2 .*never written"):
            commit(staging, plan, settings, False)
    finally:
        staging.release()
    s3.invalidate_cache()
    assert not s3.exists(f"{URL[5:]}/manifest.json")  # nothing published


def test_resume_after_a_killed_pack_redoes_only_the_missing_parts(s3, local: Path) -> None:
    table = local / "src" / "t.csv"
    argv = [str(table), URL, "--label", "species", "--skip-bad", "--shard-size", "4K",
            "--workers", "1", "--quiet"]
    ran = subprocess.run(packdata_command(argv, kill_after_parts=2), capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == -9, ran.stderr  # SIGKILLed after 2 parts
    s3.invalidate_cache()
    assert not s3.exists(f"{URL[5:]}/manifest.json")
    assert len(s3.glob(f"{staging_url(URL)[5:]}/journal/*.json")) == 2
    calls: list[tuple[int, int, int]] = []
    fastloader.pack(table, URL, workers=1, resume=True,
                    progress=lambda *args: calls.append(args), **TABLE)
    kept = calls[0][0] - 1  # the samples of shards 0 and 1, not redone
    assert kept > 0 and len(calls) == 30 - kept
    assert remote_dataset_bytes(URL) == dataset_bytes(local / "table.lmdb")
