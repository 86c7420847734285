"""The pack's summary is not buried: what Pillow or a C library (libtiff, libjpeg) says about a
file is caught with that file (skipped.json, the log) and counted in the summary, never loose
on stderr; packdata's errors speak its flags, pack()'s its arguments, never both."""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from PIL import Image

import fastloader
from fastloader.errors import PackError
from fastloader.pack.cli.main import _pack_parser, main
from fastloader.pack.cli.words import cli_words, flags
from fastloader.pack.sources import validate


def warning_tiff() -> bytes:
    """A TIFF that decodes, with an ImageDescription tag pointing past the file's end: Pillow
    warns "Tag data larger than file" (a UserWarning) each time it reads the tags."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 12), (10, 200, 30)).save(buffer, format="TIFF")
    data = bytearray(buffer.getvalue())
    offset = struct.unpack("<I", data[4:8])[0]
    count = struct.unpack("<H", data[offset:offset + 2])[0]
    entries = [bytes(data[offset + 2 + 12 * i: offset + 14 + 12 * i]) for i in range(count)]
    entries.append(struct.pack("<HHII", 270, 2, 1000, len(data) + 100000))
    entries.sort(key=lambda entry: struct.unpack("<H", entry[:2])[0])
    data[4:8] = struct.pack("<I", len(data))
    data += struct.pack("<H", len(entries)) + b"".join(entries) + b"\0\0\0\0"
    return bytes(data)


def tree(root: Path) -> Path:
    """Two good JPEGs, a TIFF Pillow warns about, a broken TIFF Pillow warns about and
    refuses."""
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        buffer = io.BytesIO()
        Image.new("RGB", (20, 10), (1, 2, 3)).save(buffer, "JPEG")
        (root / name / "ok.jpg").write_bytes(buffer.getvalue())
    (root / "a" / "warns.tif").write_bytes(warning_tiff())
    (root / "b" / "bad.tif").write_bytes(b"II*\0garbage")
    return root


def test_a_files_warnings_come_with_it_not_on_stderr(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    dst = tmp_path / "o.lmdb"
    run = subprocess.run([sys.executable, "-m", "fastloader.pack.cli", str(src), str(dst),
                          "--workers", "2", "--skip-bad"], capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert "Warning" not in lines[0] and lines[0].startswith("packed 3 images")
    assert not any("warnings.warn" in line or line.startswith("  warnings") for line in lines)
    assert "1 packed file made a decoder warn (Pillow, libtiff ...; they decode and are kept):" \
        in lines
    assert "  a/warns.tif: UserWarning: Tag data larger than file. Skipping tag 270 " \
        "(3 times)" in lines
    skipped = json.loads((dst / "skipped.json").read_text())
    assert [s["path"] for s in skipped] == ["b/bad.tif"]
    assert "the decoder also warned: UserWarning: Corrupt EXIF data" in skipped[0]["reason"]
    assert len(lines) == 5, lines  # packed, skipped + its file, warned + its file


def test_the_log_names_each_warned_file(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                        ) -> None:
    src = tree(tmp_path / "src")
    with caplog.at_level(logging.WARNING, logger="fastloader"):
        fastloader.pack(src, tmp_path / "o.lmdb", workers=1, skip_bad=True)
    warned = [r.getMessage() for r in caplog.records if r.name == validate.WARNED_LOG.name]
    assert warned == ["a/warns.tif: UserWarning: Tag data larger than file. Skipping tag 270 "
                      "(3 times)"]


def test_what_a_c_library_writes_on_fd_2_is_caught(capfd: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = validate.check_image

    def loud(data: bytes, *args: object) -> object:  # as libtiff's handler does: fprintf(stderr)
        os.write(2, b"TIFFReadDirectory: Warning, Unknown field with tag 50000\n")
        warnings.warn("a Pillow warning", UserWarning, stacklevel=1)
        return real(data, *args)

    monkeypatch.setattr(validate, "check_image", loud)
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "PNG")
    record = validate.prepare_data(buffer.getvalue())
    assert record.data is not None
    assert record.warnings == ("UserWarning: a Pillow warning",
                               "TIFFReadDirectory: Warning, Unknown field with tag 50000")
    refused = validate.prepare_data(b"not an image at all")
    assert refused.data is None and refused.warnings == ()
    assert "TIFFReadDirectory" in (refused.error or "")
    os.write(2, b"after\n")  # fd 2 is stderr again
    assert capfd.readouterr().err == "after\n"


def test_errors_speak_the_words_of_the_interface(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src = tree(tmp_path / "src")
    # shards of one item each: two finish before bad.tif, so the error offers a resume too
    with pytest.raises(PackError) as caught:
        fastloader.pack(src, tmp_path / "o.lmdb", workers=1, shard_size=1)
    said = str(caught.value)
    assert "pass skip_bad=True" in said and "resume=True" in said and "--" not in said.replace(
        str(tmp_path), "")
    with pytest.raises(PackError, match="strict=True and skip_bad=True contradict") as caught:
        fastloader.pack(src, tmp_path / "o.lmdb", strict=True, skip_bad=True)
    assert "--" not in str(caught.value)
    assert main([str(src), str(tmp_path / "o.lmdb"), "--workers", "1", "--shard-size", "1"]
                ) == 2
    err = capsys.readouterr().err
    assert "pass --skip-bad to pack the rest" in err and "rerun with --resume" in err
    assert "skip_bad" not in err and "resume=" not in err
    assert main([str(src), str(tmp_path / "o.lmdb"), "--strict", "--skip-bad"]) == 2
    assert "--strict and --skip-bad contradict" in capsys.readouterr().err


def test_every_argument_spelling_has_its_flag() -> None:
    table = flags(_pack_parser())
    for name in ("skip_bad", "strict", "resume", "source_format", "fields", "image", "label",
                 "root", "skip_empty", "masks", "max_file_size", "overwrite"):
        assert name in table, name
    said = ('--skip-bad (skip_bad=True); skip_empty (--skip-empty); see why with '
            'skip_bad=False; source_format="files"; fields= and image=; dtype=float32')
    assert cli_words(said, table) == ("--skip-bad; --skip-empty; see why without --skip-bad; "
                                      "--source-format files; --field and --image; "
                                      "dtype=float32")
