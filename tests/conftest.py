"""Shared pytest set-up: session-scoped data fixtures, native-only skips, the DALI expectation.

Fixtures here build each dataset once per session; tests that modify a dataset copy it first
(shutil.copytree into tmp_path), because every other test reads the same files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import packed_tree
from treegen import make_mixed_tree


@pytest.fixture(autouse=True, scope="session")
def _own_cache_folder(tmp_path_factory: pytest.TempPathFactory):
    """The library's cache folder (shard cache, the index's verified stamps) under the session's
    temporary folder, never the user's ~/.cache: a test run leaves nothing behind, and a stamp
    another run wrote cannot spare a test its checks. Tests that need their own set it again."""
    old = os.environ.get("FASTLOADER_CACHE_DIR")
    os.environ["FASTLOADER_CACHE_DIR"] = str(tmp_path_factory.mktemp("fastloader-cache"))
    yield
    if old is None:
        os.environ.pop("FASTLOADER_CACHE_DIR", None)
    else:
        os.environ["FASTLOADER_CACHE_DIR"] = old

NATIVE_DISABLED = os.environ.get("FASTLOADER_DISABLE_NATIVE", "") not in ("", "0")
# Set by .ci/run where DALI must be installed: its tests then may not quietly become skips.
DALI_EXPECTED = os.environ.get("FASTLOADER_EXPECT_DALI", "") not in ("", "0")
VIDEO_NATIVE_EXPECTED = os.environ.get("FASTLOADER_EXPECT_VIDEO_NATIVE", "") not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not NATIVE_DISABLED:
        return
    skip = pytest.mark.skip(reason="FASTLOADER_DISABLE_NATIVE=1: this test needs the extension")
    for item in items:
        if "native" in item.keywords:
            item.add_marker(skip)


def pytest_sessionstart(session: pytest.Session) -> None:
    if VIDEO_NATIVE_EXPECTED and not NATIVE_DISABLED:
        from fastloader.decode import video_native

        if video_native.module() is None:
            raise pytest.UsageError(
                "FASTLOADER_EXPECT_VIDEO_NATIVE=1 but fastloader._video is not built: its tests "
                "would be skipped. Install FFmpeg's headers (bash tools/ffmpeg_dev.sh) and "
                "rebuild (make install), or unset FASTLOADER_EXPECT_VIDEO_NATIVE.")
    if not DALI_EXPECTED:
        return
    from fastloader.loader.dali.pipeline import dali_available

    if not dali_available():
        raise pytest.UsageError(
            "FASTLOADER_EXPECT_DALI=1 but NVIDIA DALI is not importable: its tests would be "
            "skipped. Install it (pip install nvidia-dali-cuda120) or unset FASTLOADER_EXPECT_DALI."
        )


@pytest.fixture(scope="session")
def mixed_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """(root, relpath -> bytes) of treegen's mixed tree (every mode, format, odd size, plus
    files to ignore). Read-only: a test that adds files copies it first."""
    root = tmp_path_factory.mktemp("mixed") / "src"
    return root, make_mixed_tree(root)


@pytest.fixture(scope="session")
def dataset_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-class x 8-image LMDB dataset (images of slightly different sizes). Read-only."""
    return packed_tree(tmp_path_factory.mktemp("packed"))


@pytest.fixture()
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty bucket `bucket` on a fresh moto S3 server on 127.0.0.1 (AWS_* set for it);
    yields its s3fs file system. The loader's cache goes under tmp_path, never ~/.cache."""
    from servers import s3_server

    monkeypatch.setenv("FASTLOADER_CACHE_DIR", str(tmp_path / "cache"))
    with s3_server(monkeypatch):
        import s3fs

        fs = s3fs.S3FileSystem()
        fs.mkdir("bucket")
        yield fs


@pytest.fixture()
def served(tmp_path: Path):
    """A 32-record LMDB dataset of several shards under tmp_path/www, served over HTTP on
    127.0.0.1: yields (its URL, the server's request log and counts, tmp_path)."""
    import shutil

    from servers import http_server

    packed_tree(tmp_path / "src", classes=4, per_class=8, shard_size=12000)
    shutil.copytree(tmp_path / "src" / "data.lmdb", tmp_path / "www" / "data.lmdb")
    with http_server(tmp_path / "www") as (url, state):
        yield f"{url}/data.lmdb", state, tmp_path


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Say at the end how many tests were skipped and why, one line per reason."""
    skipped = terminalreporter.stats.get("skipped", [])
    reasons: dict[str, int] = {}
    for report in skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    mode = "without the extension" if NATIVE_DISABLED else "with the extension"
    terminalreporter.write_sep("=", f"skipped {mode}: {len(skipped)}")
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:5d}  {reason}")
