"""The package's imports run one way, downwards (ARCHITECTURE.md), and no module imports itself
through others (no import circle, inside a stage either): read them with ast."""

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


pytestmark = pytest.mark.native_neutral


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


def module_of(name: str, modules: set[str]) -> str | None:
    """The package module an imported dotted name lives in (a name imported from it dropped)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package modules it imports (lazy ones too). The root package is left out:
    it names the public API of every stage, for type checkers only (its imports sit under
    TYPE_CHECKING; at run time it imports a name's module when the name is first touched).
    So is a module's import of its own parent packages (`from fastloader.pack import tables`
    in pack/): Python imports those before the module itself, whatever it names."""
    paths = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    modules = set(paths) - {package.name}
    graph: dict[str, set[str]] = {}
    for name in sorted(modules):
        targets = {module_of(target, modules) for _, target in imported_modules(paths[name],
                                                                                package)}
        graph[name] = {t for t in targets
                       if t is not None and t != name and not name.startswith(f"{t}.")}
    return graph


def import_cycles(package: Path) -> list[list[str]]:
    """Each import circle found (as the modules round it, the first repeated last), or []."""
    graph = import_graph(package)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


def test_no_import_circle() -> None:
    assert [" -> ".join(cycle) for cycle in import_cycles(PACKAGE)] == []


def test_the_check_sees_an_import_circle(tmp_path: Path) -> None:
    """The rule can fail: a lazy import planted inside a function closes a circle, named."""
    copy = tmp_path / "fastloader"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    dataset = copy / "format" / "dataset.py"
    dataset.write_text(dataset.read_text()
                       + "\n\ndef _f():\n    from fastloader.format.open import open_dataset\n")
    found = import_cycles(copy)
    assert [set(cycle) for cycle in found] == [{"fastloader.format.dataset",
                                                "fastloader.format.open"}]
    assert upward_imports(copy) == []  # within one stage: only the circle check sees it


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


# the stages that serve every source through pack/sources/base.ItemSource (issue 26): the part
# builder, the engines and the run step never name a source's plan or items
_SOURCE_BLIND = ("pack/staging/build.py", "pack/engines/local.py", "pack/engines/ray.py",
                 "pack/pipeline/run.py")
_SOURCE_NAMES = {"ShardPlan", "SamplePlan", "TreeItems", "SampleItems", "TreeSource",
                 "SampleSource"}


def source_names(path: Path) -> set[str]:
    """The source-specific names a module uses (imported, or read as a name)."""
    tree = ast.parse(path.read_text())
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    return used & _SOURCE_NAMES


def test_the_builder_and_engines_never_ask_which_source(tmp_path: Path) -> None:
    """build, the local and Ray engines and run_pending read the ItemSource contract only; a
    copy of build.py that asks for ShardPlan is caught, so the rule can fail."""
    assert {name: source_names(PACKAGE / name) for name in _SOURCE_BLIND} == {
        name: set() for name in _SOURCE_BLIND}
    asking = tmp_path / "build.py"
    asking.write_text((PACKAGE / _SOURCE_BLIND[0]).read_text()
                      + "\n\ndef _f(plan):\n    return isinstance(plan, ShardPlan)\n")
    assert source_names(asking) == {"ShardPlan"}
