"""The public surface: every name in fastloader.__all__ resolves, the import stays light, and
type checkers read the package's types (py.typed, in the installed package and the wheel)."""

from __future__ import annotations

import importlib
import importlib.resources
import inspect
import os
import re
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest

import fastloader

pytestmark = pytest.mark.native_neutral


@pytest.mark.wheel
@pytest.mark.parametrize("name", fastloader.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(fastloader, name)
    assert value is not None
    if name != "__version__":
        # The object itself; decode and pack also name subpackages, made callable for that.
        assert value.__name__ in (name, f"fastloader.{name}") and callable(value)
        assert value.__doc__, f"{name} has no docstring"


@pytest.mark.wheel
def test_dir_lists_all_and_unknown_names_raise() -> None:
    assert sorted(dir(fastloader)) == sorted(fastloader.__all__)
    with pytest.raises(AttributeError, match="no_such_name"):
        fastloader.no_such_name  # noqa: B018


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    return result.stdout.strip()


@pytest.mark.heavy
@pytest.mark.wheel
def test_import_fastloader_does_not_import_torch() -> None:
    # The packdata CLI and the pack path must not pay for torch (or DALI).
    code = ("import sys, fastloader, fastloader.pack.cli.main, fastloader.format.open; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'nvidia', 'fastloader.loader')))")
    assert _run(code) == "[]"


@pytest.mark.heavy
@pytest.mark.wheel
def test_touching_a_loader_name_imports_torch() -> None:
    # The check above could pass by never importing anything: this one shows it can fail.
    assert _run("import sys, fastloader; fastloader.GpuNormalize; print('torch' in sys.modules)") \
        == "True"


DOCS = Path(__file__).resolve().parent.parent / "docs" / "index.rst"
MODULES = {"decode": "decode", "pack": "pipeline.tree"}
# made by fastloader: Attributes:
DATA_CLASSES = {"ImageHeader", "Manifest", "LoaderStats", "WorkerStats"}
DOCUMENTED = [n for n in fastloader.__all__ if n != "__version__" and not n.endswith("Error")]


@pytest.mark.parametrize("name", DOCUMENTED)
def test_public_names_document_args_returns_and_raises(name: str) -> None:
    value = getattr(fastloader, name)
    if isinstance(value, types.ModuleType):  # decode, pack: the callable subpackages
        value = getattr(importlib.import_module(f"fastloader.{name}.{MODULES[name]}"), name)
    doc = inspect.getdoc(value) or ""
    if name in DATA_CLASSES:
        assert "Attributes:" in doc
        return
    parameters = [p for p in inspect.signature(value).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL,) and p.name != "self"]
    if parameters:
        assert "Args:" in doc, f"{name}: no Args section"
    if inspect.isfunction(value):
        assert "Returns:" in doc, f"{name}: no Returns section"
    if name != "native_available":
        assert "Raises:" in doc, f"{name}: no Raises section"


def test_the_api_reference_lists_every_public_name() -> None:
    text = DOCS.read_text()
    for name in fastloader.__all__:
        if name != "__version__":
            assert re.search(rf"fastloader\.(\w+\.)*{name}\b", text), name


@pytest.mark.wheel
def test_the_installed_package_is_marked_typed() -> None:
    """py.typed (PEP 561) lies in the fastloader that imports, so type checkers read its types."""
    marker = importlib.resources.files("fastloader").joinpath("py.typed")
    assert marker.is_file()
    assert Path(str(marker)).parent == Path(fastloader.__file__).parent


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.heavy
def test_the_wheel_ships_py_typed(tmp_path: Path) -> None:
    """What the wheel build packs (without the extension: seconds, not minutes)."""
    for tool in ("scikit_build_core", "nanobind", "cmake", "ninja"):
        pytest.importorskip(tool, reason=f"{tool} builds the wheel (make install puts it in)")
    env = {**os.environ, "FASTLOADER_DISABLE_NATIVE": "1"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "dist"),
                    "-C", f"build-dir={tmp_path / 'build'}", str(ROOT)],
                   check=True, env=env, capture_output=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("fastloader-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "fastloader/py.typed" in names
    assert "fastloader/loader/loader.py" in names  # the listing is the package's


USER_SCRIPTS = {
    "good.py": """
import fastloader

loader = fastloader.FastLoader("data.lmdb", batch_size=64, shuffle=True,
                               transforms=[fastloader.RandomResizedCrop(224)],
                               num_threads="auto", device="cpu")
with fastloader.FastLoader("data.lmdb", backend="dali", roi_decode=False) as dali:
    batches: int = len(dali)
loader.set_epoch(1)
state: dict = loader.state_dict()
clips = fastloader.FastLoader("clips.lmdb", 8, audio=fastloader.Audio(), max_batch_seconds=None,
                              device="cpu")
videos = fastloader.FastLoader("videos.lmdb", video=fastloader.Video(), batch_size=4,
                               transforms=[fastloader.CenterCrop(64)], prefetch="auto")
""",
    "bad.py": """
import fastloader

fastloader.FastLoader("data.lmdb", batch_size="64")
fastloader.FastLoader("data.lmdb", num_threads="all")
fastloader.FastLoader("data.lmdb", backend="dali", verify_records=True)
fastloader.FastLoader("data.lmdb").set_epoch("2")
fastloader.FastLoader("clips.lmdb", audio=fastloader.Audio(), duration_buckets="8")
fastloader.FastLoader("videos.lmdb", video=fastloader.Video(), max_batch_seconds=2.0)
fastloader.FastLoader("data.lmdb", prefetch_shard=4)
""",
}


@pytest.mark.heavy
@pytest.mark.wheel
def test_mypy_reads_the_types_of_a_users_call(tmp_path: Path) -> None:
    """mypy on a user's script (fastloader found as an installed package) flags a wrong
    argument type, a wrong choice, an argument of another path (audio's and video's too) and a
    misspelt one, and passes good calls of the packed, DALI, audio and video loaders."""
    pytest.importorskip("mypy", reason="mypy is in the test extra")
    for name, text in USER_SCRIPTS.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--python-executable", sys.executable, "--no-error-summary", "good.py", "bad.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert sorted({line.split(":")[0] + ":" + line.split(":")[1] for line in errors}) == sorted(
        f"bad.py:{line}" for line in range(4, 11)), result.stdout
