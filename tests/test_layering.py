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


def copy_package(tmp_path: Path, part: str = "") -> Path:
    """A copy of the package's modules (of one folder of it, `part`) under tmp_path, for a test
    that plants a bad import in it: the copy's root."""
    copy = tmp_path / "fastloader"
    for path in (PACKAGE / part).rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    return copy


def test_every_stage_is_known() -> None:
    stages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert stages == set(ALLOWED) - {"base"}


def test_no_upward_import() -> None:
    assert upward_imports(PACKAGE) == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The rule can fail: a copy of the package with one upward import is caught, lazy or not."""
    copy = copy_package(tmp_path)
    ops = copy / "gpu" / "ops.py"
    lazy = "\n\ndef _f():\n    from fastloader.loader.pipeline import stats\n"
    ops.write_text(ops.read_text() + lazy)
    found = upward_imports(copy)
    assert found and all(line.startswith("gpu/ops.py:") for line in found)
    assert any("imports fastloader.loader.pipeline.stats (loader)" in line for line in found)


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
    copy = copy_package(tmp_path)
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
    copy = copy_package(tmp_path, "pack")
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


# loader/'s sub-packages (loader/__init__.py draws them): each may import the ones listed, and
# none imports a sibling or anything above it. loader/loader.py, the factory's module, sits on
# top and may import them all.
LOADER_ALLOWED: dict[str, set[str]] = {
    "order": set(),
    "pipeline": set(),
    "remote": {"pipeline"},
    "images": {"pipeline"},
    "factory": {"order", "pipeline", "images", "remote"},
    "packed": {"factory", "images", "pipeline", "order", "remote"},
    "clips": {"factory", "images", "pipeline", "order", "remote"},
    "dali": {"factory", "images", "pipeline", "order"},
    "dropin": {"factory", "pipeline", "order"},
    "mix": {"packed", "factory", "images", "pipeline", "order"},
}


def loader_part(module: str) -> str | None:
    """The loader sub-package of a dotted module name ("top" for loader/'s own modules)."""
    parts = module.split(".")
    if parts[:2] != ["fastloader", "loader"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in LOADER_ALLOWED else "top"


def loader_upward(package: Path) -> list[str]:
    """Every import inside loader/ from a sub-package to one it may not use."""
    bad = []
    for path in sorted((package / "loader").rglob("*.py")):
        own = loader_part(module_name(path, package))
        if own in (None, "top"):
            continue
        for line, target in imported_modules(path, package):
            other = loader_part(target)
            if other is not None and other != own and other not in LOADER_ALLOWED[own]:
                bad.append(f"{path.relative_to(package)}:{line} ({own}) imports {target}")
    return bad


def test_loader_sub_packages_are_known_and_documented() -> None:
    found = {p.name for p in (PACKAGE / "loader").iterdir() if (p / "__init__.py").exists()}
    assert found == set(LOADER_ALLOWED)
    for name in sorted(found):
        assert ast.get_docstring(ast.parse((PACKAGE / "loader" / name / "__init__.py")
                                           .read_text())), name
    # every module of loader/ lives in a sub-package but the factory's module and the package
    assert sorted(p.name for p in (PACKAGE / "loader").glob("*.py")) == ["__init__.py",
                                                                        "loader.py"]


def test_loader_sub_packages_import_only_downwards(tmp_path: Path) -> None:
    """A copy of the package where the order (the bottom) imports the factory is caught, so the
    rule can fail."""
    assert loader_upward(PACKAGE) == []
    copy = copy_package(tmp_path)
    sampler = copy / "loader" / "order" / "sampler.py"
    lazy = "\n\ndef _f():\n    from fastloader.loader.factory import options\n"
    sampler.write_text(sampler.read_text() + lazy)
    found = loader_upward(copy)
    assert found and all(line.startswith("loader/order/sampler.py:") for line in found)
    assert any(line.endswith("(order) imports fastloader.loader.factory.options")
               for line in found)


def test_the_flat_layouts_module_paths_still_import() -> None:
    """Each module path of the flat loader/ layout imports as the module it moved to (the same
    object), and the documented classes are where the docs say."""
    import importlib

    from fastloader.loader import MOVED

    for old, new in MOVED.items():
        assert importlib.import_module(f"fastloader.loader.{old}") is importlib.import_module(
            f"fastloader.loader.{new}"), old
    # the flat layout's class paths the docs named (loader modules then, sub-packages now)
    for old_path in ("audio.AudioLoader", "video.VideoLoader", "clips.ClipLoader",
                     "dali.DaliLoader", "dropin.DropInLoader", "mix.MixLoader",
                     "packed.PackedLoader"):
        module, name = old_path.split(".")
        cls = getattr(importlib.import_module(f"fastloader.loader.{module}"), name)
        assert cls.__name__ == name and issubclass(cls, fastloader.FastLoader), old_path


def long_modules(package: Path, limit: int = 400) -> list[str]:
    """The package's modules over `limit` lines, with their length."""
    return [f"{path.relative_to(package)}: {n}" for path in sorted(package.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > limit]


def test_no_module_is_over_400_lines(tmp_path: Path) -> None:
    """Modules stay under ~400 lines (DEVELOPERS.md); a 401-line module is named."""
    assert long_modules(PACKAGE) == []
    (tmp_path / "big.py").write_text("x = 1\n" * 401)
    assert long_modules(tmp_path) == ["big.py: 401"]
