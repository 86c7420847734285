"""The package's imports run one way, downwards (ARCHITECTURE.md): read them with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fastloader

PACKAGE = Path(fastloader.__file__).parent

# stage -> the stages it may import (besides itself and the base modules errors/checks).
# doctor -> loader -> (gpu, format, decode); pack -> format -> decode; gpu -> decode.
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "decode": set(),
    "format": {"decode"},
    "pack": {"format", "decode"},
    "gpu": {"decode"},
    "loader": {"gpu", "format", "decode"},
    "doctor": {"loader", "gpu", "format", "decode"},
}
BASE_MODULES = {"errors", "checks"}


def stage_of(module: str) -> str | None:
    """The stage of a dotted fastloader module name (None for the package root)."""
    parts = module.split(".")
    if parts[0] != "fastloader" or len(parts) == 1:
        return None
    if parts[1] in BASE_MODULES or parts[1] in ("_core", "__version__"):
        return "base"
    return parts[1]


def module_name(path: Path, package: Path) -> str:
    relative = path.relative_to(package.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package: Path) -> list[tuple[int, str]]:
    """(line, module) for every fastloader import in a file, lazy ones inside functions too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from fastloader.decode import tiles` imports fastloader.decode.tiles
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if (package.parent / f"{node.module}.{alias.name}".replace(".", "/")
                          ).with_suffix(".py").exists()]
    return [(line, name) for line, name in found if name.split(".")[0] == "fastloader"]


def upward_imports(package: Path) -> list[str]:
    """Every import from a file to a stage its own stage may not use."""
    bad = []
    for path in sorted(package.rglob("*.py")):
        own = stage_of(module_name(path, package))
        if own is None:  # the root __init__ names the public API of every stage
            continue
        for line, target in imported_modules(path, package):
            other = stage_of(target)
            if other is None or other in (own, "base"):
                continue
            if other not in ALLOWED[own]:
                bad.append(f"{path.relative_to(package)}:{line} ({own}) imports {target} "
                           f"({other})")
    return bad


def test_every_stage_is_known() -> None:
    stages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert stages == set(ALLOWED) - {"base"}


def test_no_upward_import() -> None:
    assert upward_imports(PACKAGE) == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The rule can fail: a copy of the package with one upward import is caught, lazy or not."""
    copy = tmp_path / "fastloader"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    ops = copy / "gpu" / "ops.py"
    ops.write_text(ops.read_text() + "\n\ndef _f():\n    from fastloader.loader import stats\n")
    found = upward_imports(copy)
    assert found and all(line.startswith("gpu/ops.py:") for line in found)
    assert any("imports fastloader.loader.stats (loader)" in line for line in found)


@pytest.mark.parametrize("stage", sorted(set(ALLOWED) - {"base"}))
def test_each_stage_has_a_docstring(stage: str) -> None:
    tree = ast.parse((PACKAGE / stage / "__init__.py").read_text())
    assert ast.get_docstring(tree)


def test_pack_sub_packages_import_only_downwards(tmp_path: Path) -> None:
    """Inside pack/: sources -> staging -> engines -> pipeline -> api -> maintain -> cli, each
    importing only the ones before it (ARCHITECTURE.md); a copy with one upward import (a
    source importing the staging) is caught, so the rule can fail."""
    order = ["sources", "staging", "engines", "pipeline", "api", "maintain", "cli"]

    def level(module: str) -> int | None:
        parts = module.split(".")
        if parts[:2] != ["fastloader", "pack"] or len(parts) < 3 or parts[2] not in order:
            return None
        return order.index(parts[2])

    def upward(package: Path) -> list[str]:
        bad = []
        for path in sorted((package / "pack").rglob("*.py")):
            own = level(module_name(path, package))
            for line, target in imported_modules(path, package) if own is not None else []:
                other = level(target)
                if other is not None and other > own:
                    bad.append(f"{path.relative_to(package)}:{line} imports {target}")
        return bad

    assert {p.name for p in (PACKAGE / "pack").iterdir() if (p / "__init__.py").exists()} \
        == set(order) - {"api"}
    assert upward(PACKAGE) == []
    copy = tmp_path / "fastloader"
    for path in (PACKAGE / "pack").rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    scan = copy / "pack" / "sources" / "scan.py"
    lazy = "\n\ndef _f():\n    from fastloader.pack.staging import plan\n"
    scan.write_text(scan.read_text() + lazy)
    found = upward(copy)
    assert found and all(line.startswith("pack/sources/scan.py:") for line in found)
    assert any(line.endswith("imports fastloader.pack.staging.plan") for line in found)
