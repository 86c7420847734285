"""The public surface: every name in fastloader.__all__ resolves, and the import stays light."""

from __future__ import annotations

import subprocess
import sys

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
    code = ("import sys, fastloader, fastloader.pack.cli, fastloader.format.dataset; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'nvidia', 'fastloader.loader')))")
    assert _run(code) == "[]"


def test_touching_a_loader_name_imports_torch() -> None:
    # The check above could pass by never importing anything: this one shows it can fail.
    assert _run("import sys, fastloader; fastloader.GpuNormalize; print('torch' in sys.modules)") \
        == "True"
