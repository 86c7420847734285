"""The public surface: every name in fastloader.__all__ resolves, and the import stays light."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import fastloader


@pytest.mark.parametrize("name", fastloader.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(fastloader, name)
    assert value is not None
    if name != "__version__":
        # The object itself; decode and pack also name subpackages, made callable for that.
        assert value.__name__ in (name, f"fastloader.{name}") and callable(value)
        assert value.__doc__, f"{name} has no docstring"


def test_dir_lists_all_and_unknown_names_raise() -> None:
    assert sorted(dir(fastloader)) == sorted(fastloader.__all__)
    with pytest.raises(AttributeError, match="no_such_name"):
        fastloader.no_such_name  # noqa: B018


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    return result.stdout.strip()


def test_import_fastloader_does_not_import_torch() -> None:
    # The packdata CLI and the pack path must not pay for torch (or DALI).
    code = ("import sys, fastloader, fastloader.pack.cli.main, fastloader.format.dataset; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'nvidia', 'fastloader.loader')))")
    assert _run(code) == "[]"


def test_touching_a_loader_name_imports_torch() -> None:
    # The check above could pass by never importing anything: this one shows it can fail.
    assert _run("import sys, fastloader; fastloader.GpuNormalize; print('torch' in sys.modules)") \
        == "True"


DOCS = Path(__file__).resolve().parent.parent / "docs" / "index.rst"
MODULES = {"decode": "decode", "pack": "pipeline.tree"}
DATA_CLASSES = {"ImageHeader", "Manifest", "LoaderStats"}  # made by fastloader: Attributes:
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
