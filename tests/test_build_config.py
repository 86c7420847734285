"""The native build's configure step on a machine without libjpeg headers: one clear line.

Runs CMake's configure on CMakeLists.txt (no compile) with the header search pointed at an
empty folder, the way a fresh machine or a Docker image without libjpeg-turbo's development
package looks to find_package(JPEG).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cmake() -> str | None:
    beside = Path(sys.executable).parent / "cmake"  # the pip cmake that `make install` adds
    return str(beside) if beside.is_file() else shutil.which("cmake")


CMAKE = _cmake()
pytestmark = pytest.mark.skipif(
    CMAKE is None or not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")),
    reason="needs cmake and a C++ compiler",
)


def configure(tmp_path: Path, env: dict[str, str], *defines: str) -> subprocess.CompletedProcess:
    """CMake's configure step of the project in a fresh build folder, with only `env` set of
    fastloader's variables (the fallback suite's FASTLOADER_DISABLE_NATIVE=1 is dropped)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOADER_")}
    full_env.update(env)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    cmd = [CMAKE, "-S", str(ROOT), "-B", str(tmp_path / "build"), *generator,
           f"-DPython_EXECUTABLE={sys.executable}", *defines]  # fmt: skip
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=300)


def fastloader_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if "fastloader:" in line]


def no_system_headers(tmp_path: Path) -> list[str]:
    """Defines that make every header and library search look only inside an empty folder."""
    empty = tmp_path / "empty"
    empty.mkdir()
    return [f"-DCMAKE_FIND_ROOT_PATH={empty}", "-DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY",
            "-DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY"]  # fmt: skip


def assert_one_clear_line(result: subprocess.CompletedProcess, *extra: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    lines = fastloader_lines(result)
    assert len(lines) == 1, f"want the reason on one line, got:\n{output}"
    for needed in ("apt-get install libjpeg62-turbo-dev", "dnf install libjpeg-turbo-devel",
                   "brew install jpeg-turbo", "FASTLOADER_DISABLE_NATIVE=1 pip install .",
                   *extra):  # fmt: skip
        assert needed in lines[0], f"{needed!r} missing from: {lines[0]}"
    assert "Call Stack" not in output, output


@pytest.mark.native_neutral
@pytest.mark.heavy
def test_no_headers_stops_with_one_line(tmp_path: Path) -> None:
    result = configure(tmp_path, {}, *no_system_headers(tmp_path))
    fetch = "FASTLOADER_JPEG_ROOT=$(python tools/fetch_libjpeg.py) pip install ."
    assert_one_clear_line(result, "jpeglib.h", fetch)


@pytest.mark.native_neutral
@pytest.mark.heavy
def test_empty_jpeg_root_stops_with_one_line(tmp_path: Path) -> None:
    empty_root = tmp_path / "jpeg-root"
    empty_root.mkdir()
    result = configure(tmp_path, {"FASTLOADER_JPEG_ROOT": str(empty_root)})
    assert_one_clear_line(result, f"FASTLOADER_JPEG_ROOT={empty_root} lacks")


@pytest.mark.native_neutral
@pytest.mark.heavy
def test_disable_native_configures_without_headers(tmp_path: Path) -> None:
    result = configure(tmp_path, {"FASTLOADER_DISABLE_NATIVE": "1"}, *no_system_headers(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert fastloader_lines(result) == [
        "-- fastloader: FASTLOADER_DISABLE_NATIVE is set: building without the extension"
    ], output
