"""Shared pytest set-up: session-scoped data fixtures, native-only skips, the DALI expectation,
and the checks that keep the passes' markers honest (pyproject.toml's `markers`).

Fixtures here build each dataset once per session; tests that modify a dataset copy it first
(shutil.copytree into tmp_path), because every other test reads the same files. Under
pytest-xdist (`make test` runs `-n auto`) each worker builds them once.

The passes (Makefile, tools/wheel.sh) select by marker, and these checks fail loudly where a
marker would make a pass drop a test silently:
- `native_neutral` (deselected by `make test-fallback`): a marked test whose own process asks
  whether the extension is usable fails, on every run, saying so; so does one also marked
  `native` (collection stops).
- `wheel` and `installed` (the tests `make wheel` runs against the installed wheel): when the
  fastloader under test is not this checkout's (the wheel's check), such a test that skips fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
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
    both = [item.nodeid for item in items
            if "native" in item.keywords and "native_neutral" in item.keywords]
    if both:
        raise pytest.UsageError(
            "marked both native (needs the extension) and native_neutral (the same without it), "
            "which contradict each other; drop one:\n  " + "\n  ".join(both))
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
    """An empty bucket `bucket` on an emptied moto S3 server on 127.0.0.1 (one per process,
    servers.s3_server; AWS_* set for it);
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


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """Why a skipped test or module was skipped, as pytest reported it."""
    longrepr = report.longrepr
    return str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Say at the end how many tests were skipped and why, one line per reason."""
    skipped = terminalreporter.stats.get("skipped", [])
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = _skip_reason(report).removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    mode = "without the extension" if NATIVE_DISABLED else "with the extension"
    terminalreporter.write_sep("=", f"skipped {mode}: {len(skipped)}")
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:5d}  {reason}")


# --- The markers' checks -------------------------------------------------------------------
# Every question "may the extension be used?" goes through fastloader.decode._native's
# _disabled_by_env (native_module, native_available, require_native, unavailable_reason; the
# video and audio decoders and the pack-time check through native_module). A probe around it
# counts the questions asked while a test's own code runs: its call and its function-scoped
# fixtures. Shared (module or session) fixtures are left out: which test first builds one
# depends on the order, and with xdist on the worker.
class _SwitchProbe:
    def __init__(self) -> None:
        self.recording = False
        self.asked = 0

    @contextlib.contextmanager
    def recording_while(self, on: bool) -> Iterator[None]:
        """Count the questions asked in the block (on) or not, as before after it."""
        before, self.recording = self.recording, on
        try:
            yield
        finally:
            self.recording = before

    def install(self) -> None:
        from fastloader.decode import _native

        original = _native._disabled_by_env

        def probed() -> bool:
            if self.recording:
                self.asked += 1
            return original()

        _native._disabled_by_env = probed


_PROBE = _SwitchProbe()
_CHECKOUT_SRC = Path(__file__).resolve().parent.parent / "src"


def _wheel_check() -> bool:
    """Whether the fastloader under test is installed from elsewhere than this checkout's src/
    (tools/wheel.sh's check of the installed wheel)."""
    import fastloader

    return _CHECKOUT_SRC not in Path(fastloader.__file__).resolve().parents


def pytest_configure(config: pytest.Config) -> None:
    _PROBE.install()
    config.pluginmanager.register(_SharedFixturesUnprobed(), "fastloader-shared-fixtures")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _PROBE.asked = 0
    with _PROBE.recording_while(True):
        yield


class _SharedFixturesUnprobed:
    """Stops the probe while a shared (module, session) fixture is built. A plugin registered
    at configure time, not a conftest hook: pytest asks a session fixture's hooks of the
    session's folder, above tests/, so a hook here never saw them and a test that happened to
    build dataset_path first was charged with its pack's questions."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        with _PROBE.recording_while(_PROBE.recording and fixturedef.scope == "function"):
            yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _PROBE.recording_while(True):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":  # --junitxml keeps it: which tests could carry native_neutral
        item.user_properties.append(("asked_native_switch", str(_PROBE.asked)))
    if report.when == "call" and report.passed and _PROBE.asked \
            and item.get_closest_marker("native_neutral"):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} is marked native_neutral (make test-fallback leaves it out), but "
            f"it asked {_PROBE.asked} time(s) whether the extension may be used "
            "(fastloader.decode._native): what it checks may differ without the extension. "
            "Remove the marker, or move the asking part to a test without it.")
    if report.skipped and (item.get_closest_marker("wheel") or item.get_closest_marker(
            "installed")) and _wheel_check():
        reason = _skip_reason(report)
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} is marked wheel or installed, so the wheel's check must run it, "
            f"but it was skipped ({reason}): give the check's venv what it needs "
            "(tools/wheel.sh) or drop the marker.")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A module the wheel's check must run, skipped whole (a module-level importorskip): its
    markers are not known once it is skipped, so its text is read for them."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and isinstance(collector, pytest.Module) and _wheel_check()):
        return
    text = collector.path.read_text(encoding="utf-8")
    if "pytest.mark.wheel" in text or "pytest.mark.installed" in text:
        reason = _skip_reason(report)
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid} holds tests marked wheel or installed, so the wheel's check must "
            f"run it, but it was skipped whole ({reason}): give the check's venv what it needs "
            "(tools/wheel.sh) or drop the marker.")
