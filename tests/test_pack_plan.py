"""The shard plan, parts and commit: the same source gives the same dataset however it is run
(workers, `packdata plan/shard/commit` in separate processes), commit refuses missing or
damaged parts naming them, --resume redoes only those, and --engine ray without Ray says how to
get it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastloader.errors import PackError
from fastloader.format.open import open_dataset
from fastloader.pack.cli.main import main
from fastloader.pack.maintain.verify import verify
from fastloader.pack.pipeline.tree import pack
from fastloader.pack.staging.build import run_shard
from fastloader.pack.staging.journal import staging_path
from fastloader.pack.staging.part import check_part
from fastloader.pack.staging.plan import ShardPlan, cut
from helpers import broken_tree, dataset_bytes

SHARD = 20_000  # bytes: the 90-file tree makes 6 shards


def _packdata(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", *argv],
                          capture_output=True, text=True, timeout=120)


def test_the_cut_depends_on_the_sizes_alone() -> None:
    sizes = np.array([5, 5, 5, 30, 1, 1, 1, 1, 9], np.int64)
    assert cut(sizes, 10).tolist() == [0, 2, 3, 4, 8, 9]  # an oversized file is its own shard
    assert cut(sizes, 10, max_files=3).tolist() == [0, 2, 3, 4, 7, 9]
    assert cut(sizes, 1 << 30).tolist() == [0, 9]
    assert cut(np.zeros(0, np.int64), 10).tolist() == [0]


@pytest.mark.parametrize("suffix", [".lmdb", ".h5"])
def test_workers_do_not_change_a_byte(tmp_path: Path, suffix: str) -> None:
    written = broken_tree(tmp_path / "src")
    one = pack(tmp_path / "src", tmp_path / f"one{suffix}", skip_bad=True,
               workers=1, shard_size=SHARD)
    two = pack(tmp_path / "src", tmp_path / f"two{suffix}", skip_bad=True,
               workers=2, shard_size=SHARD)
    assert len(one.shards) >= 4 and one.num_samples == two.num_samples == len(written)
    assert dataset_bytes(tmp_path / f"one{suffix}") == dataset_bytes(tmp_path / f"two{suffix}")
    # Skipped files lie in the plan before later shards: an LMDB shard is keyed from its plan
    # position, past its first sample number, and the manifest says so where they differ.
    if suffix == ".lmdb":
        gaps = [s.key_start - s.start for s in one.shards]
        assert gaps[0] == 0 and gaps[-1] == 2 and gaps == sorted(gaps)
        assert [s.first_key is None for s in one.shards] == [g == 0 for g in gaps]
    else:
        assert all(s.first_key is None for s in one.shards)
    assert verify(tmp_path / f"one{suffix}").ok
    with open_dataset(tmp_path / f"two{suffix}") as ds:
        assert [bytes(ds.record(i)) for i in range(len(ds))] == [written[p] for p in ds.paths]


def test_a_shard_of_skipped_files_only_leaves_no_shard_file(tmp_path: Path, capsys) -> None:
    written = broken_tree(tmp_path / "src", classes=2, per_class=3)
    assert main(["plan", "--skip-bad",
                 str(tmp_path / "src"), str(tmp_path / "out.lmdb"), "--shard-size",
                 "1", "--quiet"]) == 0
    stray = staging_path(tmp_path / "out.lmdb") / "shard-00099.mdb"
    stray.write_bytes(b"left by an earlier plan")
    manifest = pack(tmp_path / "src", tmp_path / "out.lmdb", skip_bad=True,
                    shard_size=1, resume=True)
    names = sorted(p.name for p in (tmp_path / "out.lmdb").glob("shard-*"))
    assert names == [s.file for s in manifest.shards] and len(names) == len(written)
    assert "shard-00000.mdb" not in names  # c00/a_broken.jpg was shard 0, alone
    assert verify(tmp_path / "out.lmdb").ok and manifest.stats["skipped"] == 2


@pytest.mark.heavy
def test_plan_shard_commit_in_separate_processes_equal_a_one_shot_pack(tmp_path: Path) -> None:
    broken_tree(tmp_path / "src")
    dst = tmp_path / "steps.lmdb"
    planned = _packdata("plan", "--skip-bad", str(tmp_path / "src"), str(dst), "--shard-size",
                        str(SHARD), "--quiet")
    assert planned.returncode == 0, planned.stderr
    shards = int(planned.stdout)
    assert shards >= 4 and not dst.exists()
    middle = shards // 2
    # disjoint, out of order, and one past the end (an array task too many: nothing to do)
    for span in (f"{middle}:{shards + 3}", f"0:{middle}", f"{shards}:{shards + 5}"):
        ran = _packdata("shard", str(dst), "--range", span, "--workers", "1", "--quiet")
        assert ran.returncode == 0, ran.stderr
    committed = _packdata("commit", str(dst))
    assert committed.returncode == 0, committed.stderr
    pack(tmp_path / "src", tmp_path / "once.lmdb", skip_bad=True, shard_size=SHARD)
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "once.lmdb")
    assert not staging_path(dst).exists()


def test_shard_runs_read_a_trees_files_from_its_plan_not_a_new_listing(tmp_path: Path,
                                                                       capsys) -> None:
    """The plan keeps the tree's listing (an importer whose samples are a listing): a file
    added after `packdata plan` is not packed, and no shard run lists the tree again (a run
    that did would find another source than the one planned, and refuse)."""
    written = broken_tree(tmp_path / "src")
    dst = tmp_path / "out.lmdb"
    assert main(["plan", "--skip-bad", str(tmp_path / "src"), str(dst), "--shard-size",
                 str(SHARD), "--quiet"]) == 0
    shards = int(capsys.readouterr().out)
    late = tmp_path / "src" / "c00" / "zz_late.jpg"
    late.write_bytes(next(iter(written.values())))
    assert main(["shard", str(dst), "--range", f"0:{shards}", "--workers", "1",
                 "--quiet"]) == 0
    assert main(["commit", str(dst), "--quiet"]) == 0
    with open_dataset(dst) as ds:
        assert sorted(ds.paths) == sorted(written) and len(ds) == len(written)


def test_commit_refuses_missing_and_damaged_parts_naming_the_fix(tmp_path: Path, capsys) -> None:
    broken_tree(tmp_path / "src")
    dst = tmp_path / "out.h5"
    assert main(["plan", "--skip-bad", str(tmp_path / "src"), str(dst), "--shard-size", str(SHARD),
                 "--quiet"]) == 0
    shards = int(capsys.readouterr().out)
    assert main(["shard", str(dst), "--range", f"0:{shards - 1}", "--quiet"]) == 0
    assert main(["commit", str(dst)]) == 2  # the last shard never ran
    err = capsys.readouterr().err
    last = shards - 1
    assert f"shard {last} " in err and "was never written" in err
    assert f"packdata shard {dst} --range {last}:{shards}" in err and not dst.exists()
    shard_file = staging_path(dst) / f"shard-{1:05d}.h5"  # same size, one byte changed
    data = bytearray(shard_file.read_bytes())
    data[-1] ^= 0xFF
    shard_file.write_bytes(bytes(data))
    assert main(["commit", str(dst)]) == 2
    err = capsys.readouterr().err
    assert "2 of" in err and "shard 1 " in err and "sha256" in err
    assert f"--range 1:2 --range {last}:{shards}" in err
    assert main(["shard", str(dst), "--range", "1", "--quiet"]) == 0
    assert main(["shard", str(dst), "--range", f"{last}:{shards}", "--quiet"]) == 0
    assert main(["commit", str(dst), "--quiet"]) == 0
    pack(tmp_path / "src", tmp_path / "once.h5", skip_bad=True, shard_size=SHARD)
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "once.h5")


def test_resume_redoes_only_missing_or_invalid_parts(tmp_path: Path, capsys) -> None:
    broken_tree(tmp_path / "src")
    dst = tmp_path / "out.lmdb"
    assert main(["plan", "--skip-bad", str(tmp_path / "src"), str(dst), "--shard-size", str(SHARD),
                 "--quiet"]) == 0
    shards = int(capsys.readouterr().out)
    staging = staging_path(dst)
    for k in range(shards - 1):  # the last one is missing
        run_shard(staging, k)
    (staging / "journal" / "00002.part.npz").write_bytes(b"damaged")
    plan = ShardPlan.load(staging)
    assert check_part(staging, plan, 2, None)[1].startswith("has damaged index arrays")
    before = {p.name: p.stat().st_mtime_ns for p in staging.glob("shard-*")}
    pack(tmp_path / "src", dst, skip_bad=True, shard_size=SHARD, resume=True)
    after = {p.name: p.stat().st_mtime_ns for p in dst.glob("shard-*")}
    redone = {name for name in before if after[name] != before[name]}
    assert redone == {"shard-00002.mdb"} and f"shard-{shards - 1:05d}.mdb" in after
    pack(tmp_path / "src", tmp_path / "once.lmdb", skip_bad=True, shard_size=SHARD)
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "once.lmdb")


def test_a_task_run_twice_writes_the_same_part(tmp_path: Path, capsys) -> None:
    broken_tree(tmp_path / "src", classes=1, per_class=12)
    dst = tmp_path / "out.lmdb"
    assert main(["plan", "--skip-bad",
                 str(tmp_path / "src"), str(dst), "--shard-size", "4K", "--quiet"]) == 0
    capsys.readouterr()
    staging = staging_path(dst)
    run_shard(staging, 0)
    first = dataset_bytes(staging)
    run_shard(staging, 0)
    assert dataset_bytes(staging) == first
    with pytest.raises(PackError, match="not in the plan"):
        run_shard(staging, 10_000)


def test_shard_and_commit_without_a_plan_say_to_plan_first(tmp_path: Path, capsys) -> None:
    assert main(["commit", str(tmp_path / "none.lmdb")]) == 2
    assert "packdata plan SRC" in capsys.readouterr().err
    assert main(["shard", str(tmp_path / "none.lmdb"), "--range", "0:1"]) == 2
    assert "packdata plan SRC DST" in capsys.readouterr().err
    assert main(["shard", str(tmp_path / "none.lmdb"), "--range", "3:1"]) == 2
    (tmp_path / "t.csv").write_text("path,label\n")
    assert main(["plan", "--skip-bad", str(tmp_path / "t.csv"), str(tmp_path / "t.lmdb")]) == 2
    assert "the source has no samples" in capsys.readouterr().err  # tables plan too


def test_engine_ray_without_ray_says_how_to_get_it(tmp_path: Path, monkeypatch, capsys) -> None:
    broken_tree(tmp_path / "src", classes=1, per_class=2)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(PackError, match=r'pip install "fastloader\[ray\]"'):
        pack(tmp_path / "src", tmp_path / "out.lmdb", skip_bad=True, engine="ray")
    assert main([str(tmp_path / "src"), str(tmp_path / "out.lmdb"), "--engine", "ray"]) == 2
    assert 'pip install "fastloader[ray]"' in capsys.readouterr().err
    with pytest.raises(PackError, match="needs engine='ray'"):
        pack(tmp_path / "src", tmp_path / "out.lmdb", skip_bad=True, ray_address="127.0.0.1:6379")
    assert not (tmp_path / "out.lmdb").exists()


def test_an_lmdb_shards_first_key_is_checked_at_open(tmp_path: Path) -> None:
    import json

    from fastloader.errors import DatasetError

    broken_tree(tmp_path / "src")
    dst = tmp_path / "out.lmdb"
    pack(tmp_path / "src", dst, skip_bad=True, shard_size=SHARD)
    raw = json.loads((dst / "manifest.json").read_text())
    keyed = [s for s in raw["shards"] if "first_key" in s]
    assert keyed and all(s["first_key"] > s["start"] for s in keyed)
    keyed[0].pop("first_key")  # keys then seem to start at `start`: outside the shard's range
    (dst / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match="LMDB key inside its shard's range"):
        open_dataset(dst)
    keyed[0]["first_key"] = -1
    (dst / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match="first_key=-1"):
        open_dataset(dst)
