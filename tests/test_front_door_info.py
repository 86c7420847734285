"""Issue 38 item 9: `packdata info` names a clip dataset's codecs by their containers (the index
stores UNKNOWN for every clip), and `packdata --help` names every kind of SRC it packs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audiogen import clip
from fastloader.format.kinds import AUDIO
from fastloader.pack.api import pack  # `from fastloader import pack` first hides the package
from fastloader.pack.cli.main import main
from fastloader.pack.maintain import info as info_mod

pytest.importorskip("soundfile", reason="soundfile (the audio extra) is a test dependency")

FORMATS = [("wav", "WAV"), ("flac", "FLAC"), ("flac", "FLAC"), ("mp3", "MP3"), ("opus", "OPUS"),
           ("ogg", "VORBIS")]


@pytest.fixture
def clips(tmp_path: Path) -> Path:
    samples = [{"audio": clip(16000, 0.2, 1, fmt, seed=i), "text": fmt}
               for i, (fmt, _) in enumerate(FORMATS)]
    pack(samples, tmp_path / "a.lmdb", fields={"audio": "audio", "text": "text"})
    return tmp_path / "a.lmdb"


def test_info_names_each_clips_container(clips: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(clips), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["codecs"] == {"WAV": 1, "FLAC": 2, "MP3": 1, "OPUS": 1, "VORBIS": 1}
    assert "codecs_sampled" not in info
    assert main(["info", str(clips)]) == 0
    line = next(t for t in capsys.readouterr().out.splitlines() if t.startswith("codecs"))
    assert "UNKNOWN" not in line and "WAV 1 (" in line and "FLAC 2 (" in line


def test_info_samples_a_large_clip_dataset_and_says_so(
        clips: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(AUDIO), "codecs_read", 3)
    info = info_mod.dataset_info(clips)
    assert info["codecs_sampled"] == 3 and sum(info["codecs"].values()) == 3
    # spread over the dataset: its first and last records are among the three
    assert info["codecs"]["WAV"] == 1 and info["codecs"]["VORBIS"] == 1
    assert "(of 3 records sampled evenly)" in info_mod.format_info(info)


def test_help_names_every_kind_of_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "ImageFolder-style image tree" not in text
    for words in ("image tree", "class folders of clips", ".csv .tsv .jsonl .parquet",
                  "WebDataset", ".tar", "COCO file", "Hugging Face", "s3://"):
        assert words in text, words
