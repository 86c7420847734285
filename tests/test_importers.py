"""packdata's importers: CSV/TSV/JSONL tables, WebDataset-style file groups from a folder or
.tar shards; every value read back, every bad input named (file, line or member, field)."""

from __future__ import annotations

import io
import json
import math
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fastloader
from fastloader import open_dataset
from fastloader.errors import PackError
from fastloader.pack.cli.main import main
from fastloader.pack.sources.groups import expand_braces
from imagegen import encode, photo_like

SPECIES = ["cat", "dog", "owl"]


def jpeg(k: int) -> bytes:
    return encode(photo_like(12 + k % 3, 16, k))


def write_images(folder: Path, n: int) -> list[bytes]:
    (folder / "img").mkdir(parents=True, exist_ok=True)
    data = [jpeg(k) for k in range(n)]
    for k, blob in enumerate(data):
        (folder / "img" / f"{k}.jpg").write_bytes(blob)
    return data


def rows(n: int = 6) -> list[dict[str, Any]]:
    """Table rows: a string label, an int, a float with an empty cell, text with an empty cell."""
    return [{"path": f"img/{k}.jpg", "species": SPECIES[(k * 2) % 3], "count": k * 10 - 7,
             "weight": "" if k == 4 else k * 1.5, "note": "" if k == 1 else f"n{k}, \"q\""}
            for k in range(n)]


def write_csv(path: Path, table: list[dict[str, Any]], sep: str = ",") -> Path:
    import csv

    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, list(table[0]), delimiter=sep)
        writer.writeheader()
        writer.writerows(table)
    return path


@pytest.mark.parametrize("suffix", ["csv", "tsv"])
def test_a_table_packs_and_reads_back_every_cell(tmp_path: Path, suffix: str) -> None:
    images = write_images(tmp_path, 6)
    table = write_csv(tmp_path / f"t.{suffix}", rows(), "," if suffix == "csv" else "\t")
    assert main([str(table), str(tmp_path / "o.lmdb"), "--label", "species", "--quiet",
                 "--workers", "2"]) == 0
    with open_dataset(tmp_path / "o.lmdb") as ds:
        assert [(n, s.kind) for n, s in ds.fields.items()] == [
            ("image", "image"), ("label", "int"), ("count", "int"), ("weight", "float"),
            ("note", "text")]
        assert ds.classes == sorted(SPECIES)
        for k, row in enumerate(rows()):
            got = ds.sample(k)
            assert got["image"] == images[k]
            assert ds.classes[int(got["label"])] == row["species"]
            assert got["count"] == row["count"] and got["note"] == row["note"]
            assert math.isnan(got["weight"]) if k == 4 else got["weight"] == row["weight"]
            assert ds.path(k) == row["path"]


def test_jsonl_keeps_value_types_and_root_moves_the_images(tmp_path: Path) -> None:
    images = write_images(tmp_path / "elsewhere", 4)
    records = [{"file": f"img/{k}.jpg", "cls": k % 2, "box": [k, k + 1.5], "alt": None,
                "caption": f"c{k}"} for k in range(4)]
    table = tmp_path / "t.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")
    fastloader.pack(table, tmp_path / "o.h5", root=tmp_path / "elsewhere", workers=1,
                    fields={"box": "json"})
    with open_dataset(tmp_path / "o.h5") as ds:
        assert ds.fields["box"].kind == "json" and ds.fields["cls"].kind == "int"
        for k, record in enumerate(records):
            got = ds.sample(k)
            assert got["image"] == images[k] and got["box"] == record["box"]
            assert got["cls"] == record["cls"] and got["alt"] is None
            assert got["caption"] == record["caption"]


@pytest.mark.parametrize(("content", "options", "message"), [
    ("path,n\nimg/0.jpg,1\nimg/9.jpg,2\n", [], r"t.csv line 3: field 'image' \(image\): "
     r"cannot read .*img/9.jpg"),
    ("path,n\nimg/0.jpg,1\nimg/1.jpg,2,3\n", [], "t.csv line 3: malformed line: 3 cells"),
    ("path,n\nimg/0.jpg,1\nimg/1.jpg,\n", [], r"t.csv line 3: field 'n' \(int\) is empty"),
    ("path,n\nimg/0.jpg,1\nimg/1.jpg,x\n", ["--field", "n:int"],
     r"t.csv line 3: field 'n' \(int\) 'x': invalid literal"),
    ("path,n\nimg/0.jpg,1\n,2\n", [], "t.csv line 3: field 'image' .*has no image path"),
    ("path,n\nimg/0.jpg,1\n\"img/1.jpg,2\n", [], "t.csv line 3: malformed line"),
])
def test_bad_table_rows_are_named_and_skip_bad_packs_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, options: list[str],
        message: str) -> None:
    write_images(tmp_path, 2)
    (tmp_path / "t.csv").write_text(content)
    dst = tmp_path / "o.lmdb"
    assert main([str(tmp_path / "t.csv"), str(dst), "--workers", "1", *options]) == 2
    assert pytest.raises is not None
    import re

    err = capsys.readouterr().err
    assert re.search(message, err)
    # a row found bad by a shard task leaves the staging for --resume, and says so; one the
    # table's reader refuses stops before any staging is made
    staged = (tmp_path / ".o.lmdb.partial").exists()
    assert not dst.exists() and staged == ("--resume" in err)
    assert main([str(tmp_path / "t.csv"), str(dst), "--workers", "1", "--skip-bad",
                 *options]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 bad sample (" in err and re.search(message, err)
    with open_dataset(dst) as ds:
        assert len(ds) == 1 and re.search(message, ds.manifest.stats["skipped_samples"][0][
            "reason"])


def test_jsonl_bad_records_and_kinds_are_named(tmp_path: Path) -> None:
    write_images(tmp_path, 3)
    lines = ['{"path": "img/0.jpg", "n": 1}', '{"path": "img/1.jpg", "n": "two"}',
             '{"path": "img/2.jpg", "n": ', '[1, 2]', '{"path": "img/2.jpg"}']
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(PackError, match=r"t.jsonl line 2: field 'n' \(int\): expected an int, "
                       "got str 'two'"):
        fastloader.pack(tmp_path / "t.jsonl", tmp_path / "o.lmdb", workers=1)
    manifest = fastloader.pack(tmp_path / "t.jsonl", tmp_path / "o.lmdb", workers=1,
                               skip_bad=True)
    reasons = [s["reason"] for s in manifest.stats["skipped_samples"]]
    assert manifest.num_samples == 1 and len(reasons) == 4
    assert "line 3: malformed JSON record" in reasons[1] and "line 4: a JSON list" in reasons[2]
    assert "line 5: has no field 'n', which other records have" in reasons[3]


def test_table_errors_before_any_row(tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.csv").write_text("photo,n\na.jpg,1\n")
    with pytest.raises(PackError, match=r"no image column \(looked for path, image.*"
                       r"name it with image='COL'"):
        fastloader.pack(tmp_path / "t.csv", tmp_path / "o.lmdb")
    cli = [str(tmp_path / "t.csv"), str(tmp_path / "o.lmdb"), "--quiet"]
    for flags, said in ([[], "name it with --image COL."],
                        [["--image", "photo", "--label", "kind"], "no column 'kind' for --label "],
                        [["--image", "photo", "--field", "x:int"], "--field names ['x']"]):
        assert main([*cli, *flags]) == 2
        err = capsys.readouterr().err
        assert said in err and "=" not in err, err
    with pytest.raises(PackError, match="no column 'kind' for label= among"):
        fastloader.pack(tmp_path / "t.csv", tmp_path / "o.lmdb", image="photo", label="kind")
    with pytest.raises(PackError, match=r"fields= names \['x'\], not columns"):
        fastloader.pack(tmp_path / "t.csv", tmp_path / "o.lmdb", image="photo",
                        fields={"x": "int"})


def group_files(n: int) -> list[dict[str, bytes]]:
    out = []
    for k in range(n):
        npy = io.BytesIO()
        np.save(npy, np.arange(k + 1, dtype=np.float32))
        out.append({"jpg": jpeg(k), "cls": f"{k % 3}\n".encode(), "txt": f"text {k}".encode(),
                    "json": json.dumps({"k": k}).encode(), "npy": npy.getvalue(),
                    "seg.png": encode(photo_like(6, 6, k), "PNG")})
    return out


def check_groups(dst: Path, groups: list[dict[str, bytes]]) -> None:
    with open_dataset(dst) as ds:
        assert list(ds.fields) == ["jpg", "seg.png", "cls", "json", "npy", "txt"]
        assert ds.fields["npy"].dtype == "float32" and ds.fields["npy"].shape == (-1,)
        for k, group in enumerate(groups):
            got = ds.sample(k)
            assert got["jpg"] == group["jpg"] and got["seg.png"] == group["seg.png"]
            assert got["cls"] == k % 3 and got["txt"] == f"text {k}"
            assert got["json"] == {"k": k}
            np.testing.assert_array_equal(got["npy"], np.arange(k + 1, dtype=np.float32))
        assert ds.labels.tolist() == [k % 3 for k in range(len(groups))]  # cls: the label


def test_a_folder_of_file_groups(tmp_path: Path) -> None:
    groups = group_files(5)
    for k, group in enumerate(groups):
        folder = tmp_path / "src" / ("a" if k < 3 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        for ext, data in group.items():
            (folder / f"s{k:03d}.{ext}").write_bytes(data)
    (tmp_path / "src" / "top.txt").write_text("a group of one, without the other fields")
    with pytest.raises(PackError, match="src/top: has no field 'jpg', which other samples"):
        fastloader.pack(tmp_path / "src", tmp_path / "o.lmdb", workers=1, source_format="files")
    (tmp_path / "src" / "top.txt").unlink()
    # class folders of images with sidecars: an ImageFolder tree or file groups, so say which
    with pytest.raises(PackError, match=r'read two ways.*source_format="files"'):
        fastloader.pack(tmp_path / "src", tmp_path / "o.lmdb", workers=1)
    assert main([str(tmp_path / "src"), str(tmp_path / "o.lmdb"), "--quiet", "--workers",
                 "2", "--source-format", "files"]) == 0
    check_groups(tmp_path / "o.lmdb", groups)
    assert main([str(tmp_path / "src"), str(tmp_path / "p.lmdb"), "--source-format",
                 "imagefolder", "--quiet"]) == 0  # forced: classes a and b, sidecars ignored
    with open_dataset(tmp_path / "p.lmdb") as ds:
        # the tree's reading (a v2 dataset since the tree is an importer: issue 36)
        assert ds.classes == ["a", "b"] and ds.manifest.version == 2
        assert [f["name"] for f in ds.manifest.sample_fields] == ["image", "label"]


def write_tar(path: Path, groups: list[dict[str, bytes]], start: int) -> Path:
    with tarfile.open(path, "w") as tar:
        for k, group in enumerate(groups):
            for ext, data in group.items():
                info = tarfile.TarInfo(f"shard/s{start + k:05d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_webdataset_tars_by_brace_pattern(tmp_path: Path) -> None:
    groups = group_files(6)
    for t in range(3):
        write_tar(tmp_path / f"data-{t:03d}.tar", groups[2 * t: 2 * t + 2], 2 * t)
    assert expand_braces(str(tmp_path / "data-{000..002}.tar"))[-1].endswith("data-002.tar")
    assert main([str(tmp_path / "data-{000..002}.tar"), str(tmp_path / "o.lmdb"), "--quiet",
                 "--workers", "2"]) == 0
    check_groups(tmp_path / "o.lmdb", groups)
    assert main(["verify", str(tmp_path / "o.lmdb"), "--decode"]) == 0
    with fastloader.FastLoader(tmp_path / "o.lmdb", batch_size=3, device="cpu", num_threads=1,
                               transforms=[fastloader.Resize((8, 8))],
                               fields=["txt", "cls"]) as loader:
        txt, cls = next(iter(loader))
    assert txt == ["text 0", "text 1", "text 2"] and cls.tolist() == [0, 1, 2]


def test_a_truncated_tar_and_a_bad_member_are_named(tmp_path: Path) -> None:
    groups = group_files(4)
    groups[1]["cls"] = b"one"
    good = write_tar(tmp_path / "a.tar", groups[:2], 0)
    cut = write_tar(tmp_path / "b.tar", groups[2:], 2)
    cut.write_bytes(cut.read_bytes()[:1500])  # inside the first member's data
    with pytest.raises(PackError, match=r"a.tar member shard/s00001.cls: "
                       r"field 'cls' \(int\): cannot be read"):
        fastloader.pack(str(tmp_path / "{a,b}.tar"), tmp_path / "o.lmdb", workers=1)
    manifest = fastloader.pack(str(tmp_path / "{a,b}.tar"), tmp_path / "o.lmdb", workers=1,
                               skip_bad=True)
    reasons = [s["reason"] for s in manifest.stats["skipped_samples"]]
    assert manifest.num_samples == 1 and len(reasons) == 2, reasons
    assert "b.tar: truncated at byte 1500: the tar stops after member group 'shard/s00002'" \
        in reasons[1]
    assert good.exists()
    with pytest.raises(PackError, match="no such tar shard"):
        fastloader.pack(str(tmp_path / "c.tar"), tmp_path / "p.lmdb")


def test_packdata_info_lists_the_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    write_images(tmp_path, 6)
    write_csv(tmp_path / "t.csv", rows())
    fastloader.pack(tmp_path / "t.csv", tmp_path / "o.lmdb", workers=1, label="species")
    assert main(["info", str(tmp_path / "o.lmdb")]) == 0
    out = capsys.readouterr().out
    assert "fields    image (image), label (int (3 classes)), count (int), weight (float)" in out
    assert "skipped   0 bad samples" in out


def test_options_that_do_not_fit_the_source_are_refused(tmp_path: Path) -> None:
    from imagegen import make_tree

    make_tree(tmp_path / "tree", classes=2, per_class=2)
    with pytest.raises(PackError, match="do not apply to an ImageFolder tree"):
        fastloader.pack(tmp_path / "tree", tmp_path / "o.lmdb", label="x")
    with pytest.raises(PackError, match="is a file"):
        (tmp_path / "x.bin").write_bytes(b"")
        fastloader.pack(tmp_path / "x.bin", tmp_path / "o.lmdb")
    with pytest.raises(PackError, match="shard_samples applies to Python samples only"):
        fastloader.pack(tmp_path / "tree", tmp_path / "o.lmdb", shard_samples=4)


def test_parquet_needs_pyarrow_or_reads_back(tmp_path: Path) -> None:
    from fastloader.errors import OptionalDependencyError

    write_images(tmp_path, 2)
    table = tmp_path / "t.parquet"
    try:
        import pyarrow as pa  # type: ignore[import-not-found]
        import pyarrow.parquet as pq  # type: ignore[import-not-found]
    except ImportError:
        table.write_bytes(b"PAR1")
        with pytest.raises(OptionalDependencyError, match=r"t\.parquet: reading \.parquet "
                           r"needs pyarrow"):
            fastloader.pack(table, tmp_path / "o.lmdb")
        return
    pq.write_table(pa.table({"path": ["img/0.jpg", "img/1.jpg"], "n": [3, 4]}), table)
    fastloader.pack(table, tmp_path / "o.lmdb", workers=1)
    with open_dataset(tmp_path / "o.lmdb") as ds:
        assert [ds.sample(k)["n"] for k in range(2)] == [3, 4]


def test_the_summary_names_a_skipped_sample_once(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow reads .parquet tables")
    import pyarrow as pa  # type: ignore[import-not-found]

    table = tmp_path / "t.parquet"  # image bytes in the table: the row is the only location
    pq.write_table(pa.table({"image": [jpeg(0), b"garbage", jpeg(1)], "n": [0, 1, 2]}), table)
    assert main([str(table), str(tmp_path / "o.lmdb"), "--workers", "1", "--skip-bad"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 bad sample (" in err
    said = [line for line in err.splitlines() if "garbage" in line or "Pillow" in line]
    assert len(said) == 1 and said[0].count("t.parquet line 2") == 1, err


def test_named_classes_from_python_and_bad_field_options(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = [{"image": jpeg(k), "kind": ["owl", "cat"][k % 2]} for k in range(4)]
    fastloader.pack(samples, tmp_path / "o.lmdb", workers=1,
                    fields={"image": "image", "kind": ("int", ["cat", "owl"])})
    with open_dataset(tmp_path / "o.lmdb") as ds:
        assert ds.classes == ["cat", "owl"] and ds.labels.tolist() == [1, 0, 1, 0]
        assert ds.fields["kind"].classes == ("cat", "owl")
    samples[2]["kind"] = "dog"
    with pytest.raises(PackError, match=r"sample 2: field 'kind' \(int \(2 classes\)\): "
                       "expected an int, got str 'dog'"):
        fastloader.pack(samples, tmp_path / "p.lmdb", workers=1,
                        fields={"image": "image", "kind": ("int", ["cat", "owl"])})
    write_images(tmp_path, 1)
    (tmp_path / "t.csv").write_text("path,n\nimg/0.jpg,1\n")
    assert main([str(tmp_path / "t.csv"), str(tmp_path / "q.lmdb"), "--field", "n:vector"]) == 2
    assert "is not NAME:KIND" in capsys.readouterr().err


def test_option_refusals_speak_each_interfaces_words(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """pack() names its arguments, packdata its flags, never the other's spelling."""
    (tmp_path / "t.csv").write_text("path,n\na.jpg,1\n")
    (tmp_path / "clips" / "yes").mkdir(parents=True)
    (tmp_path / "clips" / "yes" / "a.wav").write_bytes(b"RIFF")
    table, clips = str(tmp_path / "t.csv"), str(tmp_path / "clips")
    cases = [(table, {"skip_empty": True}, ["--skip-empty"],
              "skip_empty=True applies to COCO files only.",
              "--skip-empty applies to COCO files only."),
             (table, {"masks": True}, ["--masks"], "masks=True applies to COCO files only;",
              "--masks applies to COCO files only;"),
             (clips, {"label": "n"}, ["--label", "n"],
              "fields=, image=, label= and root= are table options;",
              "--field, --image, --label and --root are table options;")]
    for src, options, flags, python_words, cli_words in cases:
        with pytest.raises(PackError) as caught:
            fastloader.pack(src, tmp_path / "o.lmdb", **options)
        assert python_words in str(caught.value) and "--" not in str(caught.value)
        assert main([src, str(tmp_path / "o.lmdb"), "--quiet", *flags]) == 2
        err = capsys.readouterr().err
        assert cli_words in err and "=" not in err, err
    (tmp_path / "taken.lmdb").mkdir()
    (tmp_path / "taken.lmdb" / "mine.txt").write_text("")
    for overwrite, python_words, cli_words in (
            (False, "pass overwrite=True to replace it", "pass --overwrite to replace it"),
            (True, "so overwrite=True will not delete it", "so --overwrite will not delete it")):
        with pytest.raises(PackError, match=python_words):
            fastloader.pack(table, tmp_path / "taken.lmdb", overwrite=overwrite)
        flags = ["--overwrite"] if overwrite else []
        assert main([table, str(tmp_path / "taken.lmdb"), "--quiet", *flags]) == 2
        assert cli_words in capsys.readouterr().err
