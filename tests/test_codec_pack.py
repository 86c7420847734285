"""`packdata --codec coeffs` / pack(codec="coeffs") for every source, encoded in the pack's
workers: each JPEG record becomes a coeffs record of the same pixels (a kind records do not
hold stays JPEG, other images keep their bytes), in one pass, with resume, `packdata plan /
shard / commit` and a URL DST; the loader over it gives the JPEG pack's batches."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fastloader
from fastloader import decode, open_dataset
from fastloader.decode import coeffs
from fastloader.decode.augment import RandomHorizontalFlip
from fastloader.decode.detect import ResizeFit
from fastloader.errors import PackError
from fastloader.format.manifest import Codec
from fastloader.pack.cli.main import main
from fastloader.pack.staging.journal import staging_path
from helpers import coco_file, dataset_bytes, remote_dataset_bytes, train_transforms
from imagegen import encode, photo_like
from jpeg_writer import first_scans

pytestmark = pytest.mark.native
N = 10


def _jpeg(k: int) -> bytes:
    return encode(photo_like(48 + 3 * k, 64 + 2 * k, 40 + k), quality=90)


def _table(root: Path) -> tuple[Any, dict[str, Any]]:
    (root / "img").mkdir(parents=True)
    lines = ["path,kind"]
    for k in range(N):
        (root / "img" / f"{k}.jpg").write_bytes(_jpeg(k))
        lines.append(f"img/{k}.jpg,{'ab'[k % 2]}")
    (root / "t.csv").write_text("\n".join(lines) + "\n")
    return root / "t.csv", {"label": "kind"}


def _tar(root: Path) -> tuple[Any, dict[str, Any]]:
    root.mkdir(parents=True)
    with tarfile.open(root / "w.tar", "w") as tar:
        for k in range(N):
            for name, data in ((f"{k:03d}.jpg", _jpeg(k)), (f"{k:03d}.cls", b"%d" % (k % 3))):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return root / "w.tar", {}


def _coco(root: Path) -> tuple[Any, dict[str, Any]]:
    """COCO with boxes and rasterized masks; half the frames JPEG, half PNG."""
    path = coco_file(root, N)
    for k in range(0, N, 2):
        (root / "images" / f"{k:03d}.png").write_bytes(encode(photo_like(30, 40, k)))
    return path, {"masks": True}


def _python(root: Path) -> tuple[Any, dict[str, Any]]:
    """Python samples: JPEGs, a PNG, a progressive JPEG cut after 3 scans (stays JPEG), and
    a further image field (keeps its bytes)."""
    samples = [{"image": _jpeg(k), "depth": _jpeg(k + 1), "label": k % 3} for k in range(N)]
    samples[3]["image"] = encode(photo_like(40, 56, 3), "PNG")
    samples[5]["image"] = first_scans(encode(photo_like(32, 40, 4), "JPEG", "RGB",
                                             progressive=True), 3)
    fields = {"image": "image", "depth": "image", "label": "int"}
    return samples, {"fields": fields, "shard_samples": 4}


SOURCES = {"table": _table, "tar": _tar, "coco": _coco, "python": _python}


def _batches(dst: Any, transforms: Any = None) -> list[list[Any]]:
    """One pass (fixed seed; random crops and flips unless transforms; sizes the JPEG path
    takes no DCT-scaled decode at), each batch's values cloned."""
    out = []
    with fastloader.FastLoader(dst, batch_size=4, shuffle=True, seed=7, device="cpu",
                               transforms=transforms or train_transforms(24)) as loader:
        for batch in loader:
            values = batch.values() if isinstance(batch, dict) else batch
            out.append([v.clone() if isinstance(v, torch.Tensor) else v for v in values])
    return out


def _same(a: list[list[Any]], b: list[list[Any]]) -> bool:
    return len(a) == len(b) > 0 and all(
        len(x) == len(y) and all(torch.equal(u, v) if isinstance(u, torch.Tensor) else
                                 repr(u) == repr(v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True))


def _check_records(plain: Path, coded: Path) -> dict[str, int]:
    """Every record of coded against plain's: a coeffs record where plain has a JPEG the codec
    holds (the same pixels), else the same bytes; the codec column says which. Counts by
    codec name."""
    kinds: dict[str, int] = {}
    with open_dataset(plain) as a, open_dataset(coded) as b:
        assert len(a) == len(b)
        for i in range(len(a)):
            old, new = bytes(a.record(i)), bytes(b.record(i))
            kind = Codec(int(b.codecs[i]))
            kinds[kind.name] = kinds.get(kind.name, 0) + 1
            assert coeffs.is_coeffs(new) == (kind == Codec.COEFFS)
            if kind == Codec.COEFFS:
                assert int(a.codecs[i]) == Codec.JPEG and new == coeffs.encode(old)
                assert np.array_equal(decode(new), decode(old))
            else:
                assert new == old and int(a.codecs[i]) == kind
        assert np.array_equal(a.labels, b.labels)
    return kinds


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_every_source_packs_coeffs_records_in_one_pass(tmp_path: Path, kind: str) -> None:
    src, options = SOURCES[kind](tmp_path / "in")
    plain, coded = tmp_path / "plain.lmdb", tmp_path / "coded.lmdb"
    fastloader.pack(src, plain, workers=2, shard_size=4000, **options)
    manifest = fastloader.pack(src, coded, workers=2, shard_size=4000, codec="coeffs",
                               **options)
    assert manifest.version == 2 and manifest.options["codec"] == "coeffs"
    assert not list(tmp_path.glob(".*"))  # no JPEG pack beside DST
    kinds = _check_records(plain, coded)
    jpegs = {"table": N, "tar": N, "coco": N // 2, "python": N - 2}[kind]
    assert kinds["COEFFS"] == manifest.stats["recoded"] == jpegs
    assert manifest.stats["kept_jpeg"] == (1 if kind == "python" else 0)
    if kind == "python":  # the further image field keeps its JPEG bytes
        with open_dataset(coded) as ds:
            assert bytes(ds.value("depth", 0)) == src[0]["depth"]
    assert _same(_batches(coded), _batches(plain))


def test_a_tree_packs_coeffs_in_one_pass_as_recode_makes_it(tmp_path: Path, mixed_tree) -> None:
    plain, coded, recoded = (tmp_path / f"{n}.lmdb" for n in ("plain", "coded", "recoded"))
    fastloader.pack(mixed_tree[0], plain, workers=2, quiet=True)
    manifest = fastloader.pack(mixed_tree[0], coded, workers=2, codec="coeffs")
    assert main(["recode", str(plain), str(recoded), "--codec", "coeffs", "--quiet"]) == 0
    kinds = _check_records(plain, coded)
    assert kinds["COEFFS"] == manifest.stats["recoded"] > 0 and kinds["PNG"] > 0
    with open_dataset(coded) as a, open_dataset(recoded) as b:
        assert [bytes(a.record(i)) for i in range(len(a))] == \
            [bytes(b.record(i)) for i in range(len(b))]
        assert a.manifest.options["codec"] == "coeffs" and a.manifest.version == 2


def test_a_jpeg_pack_says_nothing_of_a_codec(tmp_path: Path, mixed_tree) -> None:
    manifest = fastloader.pack(mixed_tree[0], tmp_path / "a.lmdb", workers=1, codec="jpeg")
    assert "codec" not in manifest.options and "recoded" not in manifest.stats


def test_resume_reuses_coeffs_parts_and_a_jpeg_plan_is_not_reused(tmp_path: Path) -> None:
    src, options = _table(tmp_path / "in")
    dst = tmp_path / "d.lmdb"

    def stop(done: int, total: int, nbytes: int) -> None:
        if done >= 6:
            raise OSError("disk full (simulated)")

    with pytest.raises(OSError, match="simulated"):
        fastloader.pack(src, dst, workers=1, shard_size=3000, codec="coeffs", progress=stop,
                        **options)
    staged = staging_path(dst)
    assert json.loads((staged / "plan.json").read_text())["codec"] == "coeffs"
    kept = {p.name: p.stat().st_mtime_ns for p in staged.glob("shard-*")}
    assert kept
    manifest = fastloader.pack(src, dst, workers=1, shard_size=3000, codec="coeffs",
                               resume=True, **options)
    assert manifest.stats["recoded"] == N and manifest.options["codec"] == "coeffs"
    assert all((dst / name).stat().st_mtime_ns == stamp for name, stamp in kept.items())
    with open_dataset(dst) as ds:
        assert (np.asarray(ds.codecs) == Codec.COEFFS).all()
    with pytest.raises(OSError, match="simulated"):  # a JPEG pack cannot reuse these parts
        fastloader.pack(src, dst, workers=1, shard_size=3000, codec="coeffs", progress=stop,
                        overwrite=True, **options)
    manifest = fastloader.pack(src, dst, workers=1, shard_size=3000, resume=True,
                               overwrite=True, **options)
    assert "codec" not in manifest.options
    with open_dataset(dst) as ds:
        assert (np.asarray(ds.codecs) == Codec.JPEG).all()


def test_packdata_plan_shard_commit_with_codec_coeffs(tmp_path: Path, capsys) -> None:
    src, _ = _table(tmp_path / "in")
    dst = tmp_path / "steps.lmdb"
    assert main(["plan", str(src), str(dst), "--label", "kind", "--codec", "coeffs",
                 "--shard-size", "4000", "--quiet"]) == 0
    shards = int(capsys.readouterr().out.split()[0])
    assert shards >= 2
    assert json.loads((staging_path(dst) / "plan.json").read_text())["codec"] == "coeffs"
    assert main(["shard", str(dst), "--range", "0:1", "--quiet"]) == 0
    assert main(["shard", str(dst), "--range", f"1:{shards}", "--quiet"]) == 0
    assert main(["commit", str(dst), "--quiet"]) == 0
    fastloader.pack(src, tmp_path / "api.lmdb", label="kind", workers=2, codec="coeffs",
                    shard_size=4000)
    with open_dataset(dst) as a, open_dataset(tmp_path / "api.lmdb") as b:
        assert a.manifest.options["codec"] == "coeffs"
        assert [a.record(i) == b.record(i) for i in range(N)] == [True] * N
        assert (np.asarray(a.codecs) == Codec.COEFFS).all()


@pytest.mark.heavy
def test_a_url_dst_gets_the_local_packs_bytes(tmp_path: Path, s3) -> None:
    src, options = _table(tmp_path / "in")
    local = tmp_path / "local.lmdb"
    fastloader.pack(src, local, workers=2, shard_size=4000, codec="coeffs", **options)
    fastloader.pack(src, "s3://bucket/remote.lmdb", workers=2, shard_size=4000,
                    codec="coeffs", **options)
    there, here = remote_dataset_bytes("s3://bucket/remote.lmdb"), dataset_bytes(local)
    assert there == here and here["manifest.json"]["options"]["codec"] == "coeffs"


def test_bad_codec_options_are_refused_before_anything_is_written(tmp_path: Path,
                                                                   mixed_tree) -> None:
    with pytest.raises(PackError, match="contradict"):
        fastloader.pack(mixed_tree[0], tmp_path / "a.lmdb", codec="coeffs", tiles=True)
    with pytest.raises(PackError, match="not one of"):
        fastloader.pack(mixed_tree[0], tmp_path / "b.lmdb", codec="webp")
    assert list(tmp_path.iterdir()) == []


CHILD = """
import sys
import fastloader
from fastloader.errors import PackError
try:
    fastloader.pack(sys.argv[1], sys.argv[2], codec="coeffs")
except PackError as exc:
    print("PackError:", exc)
"""


def test_without_the_extension_codec_coeffs_is_refused_naming_why(tmp_path: Path,
                                                                  mixed_tree) -> None:
    """The env switch is read at import, so the pack runs in a child with it set."""
    env = {**os.environ, "FASTLOADER_DISABLE_NATIVE": "1"}
    result = subprocess.run([sys.executable, "-c", CHILD, str(mixed_tree[0]),
                             str(tmp_path / "d.lmdb")], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "codec='coeffs' cannot pack" in result.stdout and "--codec jpeg" in result.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.heavy
def test_ray_tasks_encode_as_the_local_engine_does(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install "
                              "'fastloader[ray]')")
    src, options = _table(tmp_path / "in")
    fastloader.pack(src, tmp_path / "local.lmdb", workers=2, shard_size=4000, codec="coeffs",
                    **options)
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update({"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1")
        fastloader.pack(src, tmp_path / "ray.lmdb", shard_size=4000, codec="coeffs",
                        engine="ray", **options)
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert dataset_bytes(tmp_path / "ray.lmdb") == dataset_bytes(tmp_path / "local.lmdb")


def _coco_with_boxes_and_masks(root: Path) -> tuple[Any, dict[str, Any]]:
    """COCO (boxes, masks) over JPEG frames large enough for letterbox crops."""
    path = coco_file(root, N)
    for k in range(N):
        (root / "images" / f"{k:03d}.png").write_bytes(encode(photo_like(30, 40, k)))
    return path, {"masks": True}


@pytest.mark.parametrize("tiled", [False, True], ids=["untiled", "tiled"])
def test_recode_of_a_v2_dataset_keeps_boxes_masks_and_columns(tmp_path: Path,
                                                               tiled: bool) -> None:
    from fastloader.pack.pipeline.recode import recode

    src, options = _coco_with_boxes_and_masks(tmp_path / "in")
    plain, tiles, coded = (tmp_path / f"{n}.lmdb" for n in ("plain", "tiles", "coded"))
    fastloader.pack(src, plain, workers=2, shard_size=4000, **options)
    source = plain
    if tiled:
        fastloader.pack(src, tiles, workers=2, shard_size=4000, tiles=True, **options)
        source = tiles
    manifest = recode(source, coded)
    assert manifest.version == 2 and manifest.options["codec"] == "coeffs"
    assert "tiles" not in manifest.options and manifest.stats["recoded"] == N
    with open_dataset(coded) as ds, open_dataset(plain) as base:
        assert not ds.tiled and "tiles_header" not in ds.manifest.fields
        assert ds.manifest.sample_fields == base.manifest.sample_fields
        for i in range(N):
            new, old = ds.sample(i), base.sample(i)
            assert coeffs.is_coeffs(new["image"])
            assert np.array_equal(decode(new["image"]), decode(old["image"]))
            for name in old:
                if name != "image":
                    assert np.array_equal(new[name], old[name]) if isinstance(
                        old[name], np.ndarray) else new[name] == old[name], (i, name)
            assert "mask" in old and "boxes" in old
    assert _same(_batches(coded), _batches(plain))
    letterbox = [ResizeFit(48, fill=114), RandomHorizontalFlip()]
    assert _same(_batches(coded, letterbox), _batches(plain, letterbox))
    assert main(["verify", str(coded), "--decode", "--quiet"]) == 0
    back = recode(coded, tmp_path / "back.lmdb", codec="jpeg")
    assert back.version == 2 and back.stats["recoded"] == N
    assert _same(_batches(tmp_path / "back.lmdb"), _batches(plain))
