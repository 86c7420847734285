"""The source registry: a new source is one Source class and one register() line (detected,
opened, reopened by a shard task), and the registered sources' order detects each layout
packdata has always told apart."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from audiogen import clip
from fastloader import open_dataset
from fastloader.format.fields import FieldSpec
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package
from fastloader.pack.cli.main import main
from fastloader.pack.sources import importers, registry
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source
from fastloader.pack.sources.values import WHERE_KEY

pytestmark = pytest.mark.native_neutral


def png(path: Path, seed: int) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    Image.new("RGB", (8 + seed, 6), (30 * seed % 256, 80, 160)).save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


class Pairs(Source):
    """A test source: a .pairs file, one `IMAGE_PATH<TAB>LABEL` line a sample."""

    name = "pairs"
    rank = 45
    opened = 0  # how many times open() ran (the pack's, then each shard task's)

    def detect(self, probe: Probe) -> bool:
        return not probe.is_dir and probe.suffix == ".pairs"

    def open(self, src: str, opening: Opening) -> Opened:
        type(self).opened += 1
        path = Path(src)
        lines = path.read_text().splitlines()
        samples = [{WHERE_KEY: f"{path} line {k + 1}", "image": str(path.parent / name),
                    "label": int(label)} for k, line in enumerate(lines)
                   for name, label in [line.split("\t")]]
        specs = [FieldSpec("image", "image"), FieldSpec("label", "int")]
        return samples, specs, {"kind": self.name, "path": str(path)}


@pytest.fixture
def pairs() -> Iterator[Pairs]:
    source = registry.register(Pairs())  # the one line a new source needs
    try:
        yield source  # type: ignore[misc]
    finally:
        registry.unregister("pairs")


def _pairs_file(tmp_path: Path, n: int = 5) -> tuple[Path, list[bytes]]:
    written = [png(tmp_path / "img" / f"{k}.png", k) for k in range(n)]
    table = tmp_path / "train.pairs"
    table.write_text("".join(f"img/{k}.png\t{k % 2}\n" for k in range(n)))
    return table, written


def test_a_registered_source_is_detected_opened_and_packed(tmp_path: Path,
                                                           pairs: Pairs) -> None:
    table, written = _pairs_file(tmp_path)
    assert importers.detect(table, None) == "pairs"
    assert "pairs" in registry.names()
    pack(table, tmp_path / "out.lmdb")
    with open_dataset(tmp_path / "out.lmdb") as ds:
        assert [bytes(ds.record(k)) for k in range(len(ds))] == written
        assert [ds.sample(k)["label"] for k in range(len(ds))] == [0, 1, 0, 1, 0]


def test_a_registered_source_is_reopened_by_each_shard_task(tmp_path: Path,
                                                            pairs: Pairs) -> None:
    table, written = _pairs_file(tmp_path)
    dst = tmp_path / "out.h5"
    before = Pairs.opened
    assert main(["plan", str(table), str(dst), "--shard-size", "200", "--quiet"]) == 0
    assert main(["shard", str(dst), "--range", "0:99", "--quiet", "--workers", "1"]) == 0
    assert Pairs.opened == before + 2  # planned once, reopened once by the shard run
    assert main(["commit", str(dst), "--quiet"]) == 0
    with open_dataset(dst) as ds:
        assert [bytes(ds.record(k)) for k in range(len(ds))] == written
    planned = importers.fingerprint("pairs", str(table))
    table.write_text(table.read_text() + "img/0.png\t1\n")
    assert importers.fingerprint("pairs", str(table)) != planned  # a resume would refuse


def test_a_taken_name_is_refused(pairs: Pairs) -> None:
    with pytest.raises(ValueError, match="taken"):
        registry.register(Pairs())


def _layouts(root: Path) -> dict[str, Path]:
    """One source of each kind detection tells apart, as packdata always told them."""
    made: dict[str, Path] = {}
    png(root / "tree" / "cats" / "a.png", 0)
    made["imagefolder"] = root / "tree"
    for name in ("yes", "no"):
        (root / "speech" / name).mkdir(parents=True)
        (root / "speech" / name / "a.wav").write_bytes(clip(8000, 0.1, 1, "wav"))
    made["audiofolder"] = root / "speech"
    png(root / "groups" / "x.png", 1)
    (root / "groups" / "x.cls").write_text("1")
    made["files"] = root / "groups"
    (root / "shards").mkdir()
    with tarfile.open(root / "shards" / "a.tar", "w"):
        pass
    made["tar"] = root / "shards"
    for name, kind in (("t.csv", "csv"), ("t.tsv", "tsv"), ("t.jsonl", "jsonl"),
                       ("t.parquet", "parquet"), ("instances.json", "coco"),
                       ("s.tar", "tar"), ("s.tar.gz", "tar")):
        (root / name).write_text("")
        made[f"{kind} {name}"] = root / name
    made["tar pattern"] = root / "s-{000..009}.tar"
    (root / "split").mkdir()
    (root / "split" / "train-00000-of-00001.parquet").write_text("")
    made["parquet folder"] = root / "split"
    made["imagefolder missing"] = root / "nowhere"
    return made


def test_the_registry_order_detects_each_layout_as_before(tmp_path: Path) -> None:
    for expected, path in _layouts(tmp_path).items():
        assert importers.detect(path, None) == expected.split()[0], expected
    order = [s.name for s in sorted(map(registry.get, registry.names()[1:]),
                                    key=lambda s: s.rank)]
    assert order.index("tar") < order.index("parquet") < order.index("files") < order.index(
        "audiofolder") < order.index("csv")


def test_the_choices_keep_their_order() -> None:
    assert registry.names()[:9] == ("imagefolder", "csv", "tsv", "jsonl", "parquet", "files",
                                    "tar", "coco", "audiofolder")
    assert json.dumps(importers.SOURCE_FORMATS)


def test_speech_corpora_are_told_from_the_folders_they_resemble(tmp_path: Path) -> None:
    from audiogen import common_voice, librispeech

    librispeech(tmp_path / "LibriSpeech" / "dev-clean", {84: [121123]}, per_chapter=1)
    common_voice(tmp_path / "cv" / "en", n=1)
    (tmp_path / "saved").mkdir()
    for name in ("state.json", "dataset_info.json", "data-00000-of-00001.arrow"):
        (tmp_path / "saved" / name).write_text("{}")
    expected = {"LibriSpeech": "librispeech", "LibriSpeech/dev-clean": "librispeech",
                "LibriSpeech/dev-clean/84": "librispeech", "cv/en": "commonvoice",
                "cv/en/train.tsv": "commonvoice", "saved": "savedataset"}
    for path, kind in expected.items():
        assert importers.detect(tmp_path / path, None) == kind, path
    (tmp_path / "plain.tsv").write_text("path\tsentence\nx.mp3\thi\n")  # no clips/ beside it
    assert importers.detect(tmp_path / "plain.tsv", None) == "tsv"
