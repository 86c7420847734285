"""Sample packs (tables, COCO, Python samples) as independent shard tasks: the same dataset,
byte for byte, at any worker count; a missing or damaged part is named at commit; --resume
redoes only the missing part; plan/shard/commit as separate processes match a one-shot pack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fastloader
from fastloader.errors import PackError
from fastloader.pack.sources.hints import size_hint
from fastloader.pack.sources.values import TarMember
from fastloader.pack.staging.commit import SKIPPED_NAME
from fastloader.pack.staging.journal import staging_path
from fastloader.pack.staging.plan import count_bounds
from faults import packdata_command
from helpers import coco_file, dataset_bytes, sample_table

SHARD = 4 << 10  # bytes: the 30-row table makes several shards


def _python_samples(folder: Path) -> list[dict]:
    return [{"image": (folder / "img" / f"{k}.jpg").read_bytes(), "y": k,
             "v": np.arange(k % 4, dtype=np.float32)} for k in range(25)]


FIELDS = {"image": "image", "y": "int", "v": ("ndarray", "float32", (-1,))}


def test_a_table_packs_the_same_at_any_worker_count(tmp_path: Path) -> None:
    table = sample_table(tmp_path / "src", 30, bad=(4, 17))
    made = [fastloader.pack(table, tmp_path / f"w{n}.lmdb", label="species", skip_bad=True,
                            shard_size=SHARD, workers=n) for n in (1, 2)]
    assert len(made[0].shards) >= 4 and made[0].num_samples == 28
    assert dataset_bytes(tmp_path / "w1.lmdb") == dataset_bytes(tmp_path / "w2.lmdb")
    assert made[0].stats["skipped"] == 2 and (tmp_path / "w1.lmdb" / SKIPPED_NAME).is_file()
    with fastloader.open_dataset(tmp_path / "w2.lmdb") as ds:
        assert ds.classes == ["cat", "dog"] and ds.sample(4)["note"] == "note 5"


def test_coco_with_masks_packs_the_same_at_any_worker_count(tmp_path: Path) -> None:
    coco = coco_file(tmp_path / "coco")
    for n in (1, 2):
        fastloader.pack(coco, tmp_path / f"c{n}.h5", masks=True, shard_size=8 << 10,
                        workers=n)
    assert dataset_bytes(tmp_path / "c1.h5") == dataset_bytes(tmp_path / "c2.h5")
    with fastloader.open_dataset(tmp_path / "c1.h5") as ds:
        assert len(ds) == 12 and ds.sample(2)["boxes"].shape == (2, 4)


def test_python_samples_are_cut_by_count_the_same_from_a_list_or_an_iterable(
        tmp_path: Path) -> None:
    samples = _python_samples(sample_table(tmp_path / "src", 25).parent)
    a = fastloader.pack(samples, tmp_path / "a.lmdb", fields=FIELDS, shard_samples=6,
                        workers=1)
    fastloader.pack(samples, tmp_path / "b.lmdb", fields=FIELDS, shard_samples=6, workers=2)
    fastloader.pack(iter(samples), tmp_path / "c.lmdb", fields=FIELDS, shard_samples=6,
                    workers=2)
    assert [s.count for s in a.shards] == [6, 6, 6, 6, 1] and a.options["shard_samples"] == 6
    assert dataset_bytes(tmp_path / "a.lmdb") == dataset_bytes(tmp_path / "b.lmdb") == \
        dataset_bytes(tmp_path / "c.lmdb")
    with fastloader.open_dataset(tmp_path / "c.lmdb") as ds:
        assert ds.sample(23)["y"] == 23 and ds.sample(23)["v"].tolist() == [0.0, 1.0, 2.0]


def test_the_cut_rules_use_the_samples_alone(tmp_path: Path) -> None:
    assert count_bounds(10, 4).tolist() == [0, 4, 8, 10]
    assert count_bounds(8, 4).tolist() == [0, 4, 8]
    (tmp_path / "f").write_bytes(b"x" * 7)
    assert size_hint(str(tmp_path / "f")) == 7 and size_hint(tmp_path / "missing") == 0
    assert size_hint(TarMember("a.tar", 512, 99, "x.jpg")) == 99
    assert size_hint(b"abc") == 3 and size_hint(np.zeros(4, np.int16)) == 8
    with pytest.raises(PackError, match="shard_samples applies to Python samples only"):
        fastloader.pack(sample_table(tmp_path / "src", 2), tmp_path / "o.lmdb",
                        shard_samples=3)


def _table_pack(tmp_path: Path, dst: Path, **options) -> fastloader.Manifest:
    return fastloader.pack(tmp_path / "src" / "t.csv", dst, label="species", shard_size=SHARD,
                           workers=2, **options)


def _kill_after_two(tmp_path: Path, dst: Path) -> Path:
    """A pack killed after its second part: its staging folder."""
    argv = [str(tmp_path / "src" / "t.csv"), str(dst), "--label", "species", "--shard-size",
            str(SHARD), "--workers", "2", "--quiet"]
    killed = subprocess.run(packdata_command(argv, kill_after_parts=2), timeout=120,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert killed.returncode == -9 and not dst.exists()
    return staging_path(dst)


@pytest.mark.parametrize("how", ["deleted", "corrupted"])
def test_commit_names_a_missing_or_damaged_part(tmp_path: Path, how: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    sample_table(tmp_path / "src", 30)
    dst = tmp_path / "out.lmdb"
    assert subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", "plan",
                           str(tmp_path / "src" / "t.csv"), str(dst), "--label", "species",
                           "--shard-size", str(SHARD), "--quiet"], timeout=120,
                          capture_output=True).returncode == 0
    from fastloader.pack.cli.main import main

    assert main(["shard", str(dst), "--range", "0:99", "--quiet", "--workers", "2"]) == 0
    staging = staging_path(dst)
    if how == "deleted":
        (staging / "journal" / "00001.json").unlink()
    else:
        (staging / "journal" / "00001.part.npz").write_bytes(b"damaged")
    assert main(["commit", str(dst), "--quiet"]) != 0 and not dst.exists()
    err = capsys.readouterr().err
    assert "shard 1 (files 5..8, first 'sample 5')" in err
    assert f"packdata shard {dst} --range 1:2" in err
    assert main(["shard", str(dst), "--range", "1:2", "--quiet"]) == 0
    assert main(["commit", str(dst), "--quiet"]) == 0
    _table_pack(tmp_path, tmp_path / "fresh.lmdb")
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "fresh.lmdb")


def test_resume_redoes_only_the_missing_parts(tmp_path: Path) -> None:
    sample_table(tmp_path / "src", 30)
    dst = tmp_path / "out.lmdb"
    staging = _kill_after_two(tmp_path, dst)
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in staging.glob("shard-*")}
    assert len(kept) == 2 and len(list((staging / "journal").glob("*.part.npz"))) == 2
    _table_pack(tmp_path, dst, resume=True)
    assert {name: ((dst / name).stat().st_ino, (dst / name).stat().st_mtime_ns)
            for name in kept} == kept  # reused, not rewritten
    _table_pack(tmp_path, tmp_path / "fresh.lmdb")
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "fresh.lmdb")


def test_planning_stats_each_image_once_for_its_size_and_key(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from fastloader.pack.sources import hints

    (tmp_path / "a.jpg").write_bytes(b"x" * 7)
    samples = [{"image": str(tmp_path / "a.jpg"), "y": 1}, {"image": b"abc", "y": 2},
               {"image": str(tmp_path / "missing.jpg"), "y": 3}]
    apart = hints.size_hints(samples, "image"), hints.item_keys(samples, ["image"])
    stats: list[str] = []
    real = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: stats.append(path) or real(path))
    sizes, keys = hints.sizes_and_keys(samples, "image", ["image"])
    assert sizes.tolist() == apart[0].tolist() == [7, 3, 0]
    assert keys is not None and apart[1] is not None and np.array_equal(keys, apart[1])
    assert sorted(stats) == sorted([samples[0]["image"], samples[2]["image"]])  # once each


def test_a_pil_image_is_keyed_by_its_pixels() -> None:
    from PIL import Image

    from fastloader.pack.sources.values import EncodeAs
    from fastloader.pack.staging.keys import sample_key

    def image(pixel: int) -> Image.Image:
        made = Image.new("RGB", (8, 6), (10, 20, 30))
        made.putpixel((3, 2), (pixel, 0, 0))
        return made

    def key(value: object) -> bytes:
        return sample_key({"image": value, "y": 1}, frozenset({"image"}))

    assert key(image(5)) == key(image(5))  # two objects, the same pixels: the same key
    assert key(image(5)) != key(image(6))  # one pixel changed
    assert key(EncodeAs(image(5), "jpeg", 90)) == key(EncodeAs(image(5), "jpeg", 90))
    assert key(EncodeAs(image(5), "jpeg", 90)) != key(EncodeAs(image(6), "jpeg", 90))


@pytest.mark.heavy
def test_plan_shard_commit_as_processes_match_a_one_shot_pack(tmp_path: Path) -> None:
    coco = coco_file(tmp_path / "coco")
    dst = tmp_path / "steps.lmdb"

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", *argv],
                              capture_output=True, text=True, timeout=120)

    planned = cli("plan", str(coco), str(dst), "--masks", "--shard-size", "8K", "--quiet")
    assert planned.returncode == 0, planned.stderr
    shards = int(planned.stdout.split()[0])
    assert shards >= 3
    for lo in range(0, shards, 2):  # two shards a run, as an array job would
        ran = cli("shard", str(dst), "--range", f"{lo}:{lo + 2}", "--quiet")
        assert ran.returncode == 0, ran.stderr
    assert cli("commit", str(dst), "--quiet").returncode == 0
    fastloader.pack(coco, tmp_path / "once.lmdb", masks=True, shard_size=8 << 10, workers=2)
    assert dataset_bytes(dst) == dataset_bytes(tmp_path / "once.lmdb")


def test_a_changed_source_is_refused_by_a_shard_run(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    table = sample_table(tmp_path / "src", 12)
    dst = tmp_path / "out.lmdb"
    from fastloader.pack.cli.main import main

    assert main(["plan", str(table), str(dst), "--shard-size", str(SHARD), "--quiet"]) == 0
    table.write_text(table.read_text().replace("note 3", "note three"))
    assert main(["shard", str(dst), "--range", "0:1", "--quiet"]) != 0
    assert "changed since its shard plan was made" in capsys.readouterr().err


def test_tar_shards_named_relative_plan_and_reopen_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tarfile

    from fastloader.pack.cli.main import main

    sample_table(tmp_path / "src", 16)
    for t in range(2):
        with tarfile.open(tmp_path / f"d-{t}.tar", "w") as tar:
            for k in range(t * 8, t * 8 + 8):
                tar.add(tmp_path / "src" / "img" / f"{k}.jpg", arcname=f"s{k:03d}.jpg")
                (tmp_path / f"s{k:03d}.cls").write_text(str(k % 3))
                tar.add(tmp_path / f"s{k:03d}.cls", arcname=f"s{k:03d}.cls")
    monkeypatch.chdir(tmp_path)  # the pattern is relative: the tasks reopen it all the same
    assert main(["plan", "d-{0..1}.tar", "steps.lmdb", "--shard-size", "4K", "--quiet"]) == 0
    assert main(["shard", "steps.lmdb", "--range", "0:99", "--quiet"]) == 0
    assert main(["commit", "steps.lmdb", "--quiet"]) == 0
    made = fastloader.pack("d-{0..1}.tar", "once.lmdb", shard_size=4 << 10, workers=2)
    assert len(made.shards) >= 3 and made.num_samples == 16
    assert dataset_bytes(tmp_path / "steps.lmdb") == dataset_bytes(tmp_path / "once.lmdb")
